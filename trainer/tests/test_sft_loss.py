"""The SFT loss (loss.kind = "sft"): the negative log-likelihood of exactly the policy's tokens.

The expected values are computed here independently (log_softmax over hand-made logits,
gathered at the next token), never through the trainer's logprob code.
"""

import pytest
import torch

from ratchet_trainer.core.batch import batch_from_tensors, make_micro_batch
from ratchet_trainer.core.config import LossConfig, ConfigError, parse_trainer_config
from ratchet_trainer.core.loss import LossStats, Normalizer, micro_batch_loss

V = 13

# Two multi-turn trajectories: prompt (0), assistant turn (1), tool output (0), assistant turn (1).
MASKS = [
    [0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1],
    [0, 0, 1, 1, 0, 0, 0, 1, 1, 1],
]


def _batch(masks=MASKS, seed=0, floor_logprobs=False):
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([m for ms in masks for m in ms], dtype=torch.uint8)
    T = int(mask.numel())
    off = [0]
    pos = []
    for ms in masks:
        off.append(off[-1] + len(ms))
        pos += list(range(len(ms)))
    # Behaviour logprobs and advantages that SFT must not read: floor values and wild advantages.
    lp = torch.full((T,), -9999.0) if floor_logprobs else torch.zeros(T)
    t = {"input_ids": torch.randint(0, V, (T,), generator=g, dtype=torch.int32),
         "position_ids": torch.tensor(pos, dtype=torch.int32), "loss_mask": mask,
         "advantages": torch.randn(T, generator=g) * 100, "inference_logprobs": lp,
         "sample_offsets": torch.tensor(off, dtype=torch.int64)}
    return batch_from_tensors(t, {"format": "ratchet.batch/v1"})


def _logits(batch, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, V, generator=g).requires_grad_(True) for n in batch.sample_lengths()]


def _loss(batch, logits, normalization="token", groups=((0, 1),)):
    cfg = LossConfig(kind="sft", normalization=normalization)
    norm = Normalizer.for_batch(batch, max_tokens=16)
    stats = LossStats()
    total = 0.0
    for ids in groups:
        ids = list(ids)
        mb = make_micro_batch(batch, ids, torch.device("cpu"))
        L = mb.input_ids.shape[1]
        lg = torch.stack([torch.nn.functional.pad(logits[i], (0, 0, 0, L - logits[i].shape[0])) for i in ids])
        loss = micro_batch_loss(lg, mb, cfg, norm, stats)
        loss.backward()
        total += float(loss.detach())
    return total, stats


def _expected(batch, logits, normalization="token"):
    """Independent: per sample, NLL of token t under logits[t-1], for exactly the masked-in tokens."""
    off = batch.sample_offsets.tolist()
    per_traj = []
    for i, lg in enumerate(logits):
        ids = batch.input_ids[off[i]:off[i + 1]].long()
        m = batch.loss_mask[off[i]:off[i + 1]].bool()
        lsm = torch.log_softmax(lg.detach().double(), dim=-1)
        nll = [-float(lsm[t - 1, ids[t]]) for t in range(1, len(ids)) if m[t]]
        per_traj.append(nll)
    if normalization == "token":
        return sum(sum(x) for x in per_traj) / sum(len(x) for x in per_traj)
    if normalization == "sequence":
        return sum(sum(x) / len(x) for x in per_traj) / len(per_traj)
    return sum(sum(x) for x in per_traj) / (len(per_traj) * 16)


@pytest.mark.parametrize("normalization", ["token", "sequence", "dr_grpo"])
def test_sft_loss_is_the_nll_of_exactly_the_masked_tokens(normalization):
    batch = _batch()
    logits = _logits(batch)
    got, stats = _loss(batch, logits, normalization)
    assert got == pytest.approx(_expected(batch, logits, normalization), rel=1e-5)
    assert stats.tokens == sum(sum(m[1:]) for m in MASKS)


def test_sft_gradient_reaches_exactly_the_rows_that_predict_policy_tokens():
    batch = _batch()
    logits = _logits(batch)
    _loss(batch, logits)
    off = batch.sample_offsets.tolist()
    for i, lg in enumerate(logits):
        m = batch.loss_mask[off[i]:off[i + 1]]
        used = torch.zeros(lg.shape[0], dtype=torch.bool)
        used[:-1] = m[1:].bool()  # row t-1 predicts token t
        assert torch.all(lg.grad[~used] == 0), f"sample {i}: a prompt or tool-output token carries loss"
        assert torch.all(lg.grad[used].abs().sum(-1) > 0), f"sample {i}: a policy token carries no loss"


def test_sft_ignores_advantages_behaviour_logprobs_and_unmasked_token_ids():
    a, b = _batch(seed=0), _batch(seed=0, floor_logprobs=True)
    logits = _logits(a)
    la, _ = _loss(a, [x.detach().clone().requires_grad_(True) for x in logits])
    lb, _ = _loss(b, [x.detach().clone().requires_grad_(True) for x in logits])
    assert la == pytest.approx(lb, rel=1e-6)
    # Changing a tool-output token's id changes nothing (it is input, never a target).
    c = _batch(seed=0)
    c.input_ids[6] = (int(c.input_ids[6]) + 1) % V  # sample 0, tool output
    lc, _ = _loss(c, [x.detach().clone().requires_grad_(True) for x in logits])
    assert lc == pytest.approx(la, rel=1e-6)
    # Changing a policy token's id does.
    d = _batch(seed=0)
    d.input_ids[4] = (int(d.input_ids[4]) + 1) % V
    ld, _ = _loss(d, [x.detach().clone().requires_grad_(True) for x in logits])
    assert ld != pytest.approx(la, rel=1e-6)


def test_sft_micro_batches_sum_to_the_whole_batch():
    batch = _batch()
    logits = _logits(batch)
    whole, _ = _loss(batch, [x.detach().clone().requires_grad_(True) for x in logits])
    split, _ = _loss(batch, [x.detach().clone().requires_grad_(True) for x in logits], groups=((0,), (1,)))
    assert split == pytest.approx(whole, rel=1e-6)


def test_sft_stats_report_the_mean_nll():
    batch = _batch()
    logits = _logits(batch)
    _, stats = _loss(batch, logits)
    assert stats.metrics("sft")["nll"] == pytest.approx(_expected(batch, logits, "token"), rel=1e-5)


# -- the step's nll metric: several updates, several ranks ----------------------------------------

# lr 0: every update sees the same weights, so each setting's nll must be the batch's one nll.
SFT = {"loss": {"kind": "sft"}, "optim": {"lr": 0.0, "weight_decay": 0.0}}


def _sft_batch(tmp_path):
    from helpers import make_samples
    from ratchet_trainer.core import write_batch

    samples = make_samples(256, lengths=(16, 20, 12, 18, 14), advantages=(0.0,) * 5)
    return write_batch(tmp_path, "sft", samples, {"run_id": "run", "step": 0, "vocab_size": 256})


def _independent_nll(refs) -> float:
    """Mean -log p of the masked tokens, from the trainer's plain full-logits scorer (not the loss code)."""
    from helpers import make_cfg
    from ratchet_trainer.core import Trainer, load_batch

    batch = load_batch(*refs)
    lp = torch.cat(Trainer("run", make_cfg("tiny", **SFT)).sample_logprobs(batch))
    m = batch.loss_mask.bool()
    return -float(lp[m].double().sum()) / int(m.sum())


@pytest.mark.parametrize("over", [{}, {"minibatches": 2}, {"minibatches": 2, "epochs": 2}])
def test_sft_step_nll_is_the_batch_nll_whatever_the_updates(over, tmp_path):
    from helpers import make_cfg
    from ratchet_trainer.core import Trainer, load_batch

    refs = _sft_batch(tmp_path)
    m = Trainer("run", make_cfg("tiny", **SFT, **over)).step(0, load_batch(*refs))
    assert m["updates"] == over.get("minibatches", 1) * over.get("epochs", 1)
    assert m["nll"] == pytest.approx(_independent_nll(refs), rel=1e-5)


def test_sft_step_nll_on_two_ranks_is_the_one_process_value(tmp_path):
    import dist_worker

    refs = _sft_batch(tmp_path)
    cases = [("one", SFT, refs), ("minibatches", {**SFT, "minibatches": 2}, refs)]
    got = dist_worker.spawn(dist_worker.run_cases, 2, tmp_path, cases)
    want = _independent_nll(refs)
    for name, _, _ in cases:
        assert got[name]["metrics"]["nll"] == pytest.approx(want, rel=1e-5), name


def test_config_accepts_sft_and_names_the_choices_on_a_typo():
    assert parse_trainer_config({"loss": {"kind": "sft"}, "model": {"path": "x"}, "seq_len": 64}).loss.kind == "sft"
    with pytest.raises(ConfigError, match="sft"):
        parse_trainer_config({"loss": {"kind": "sfft"}, "model": {"path": "x"}, "seq_len": 64})
