"""Shared-prefix layout (core/batch.py): samples that share token prefixes are laid out as a prefix
tree in one row, the shared prefix computed once. Checked against the plain computation: each
sample's logits alone, and a whole trainer step in the padded layout (loss, every gradient)."""

import pytest
import torch

from ratchet_trainer.core import Trainer, load_batch
from ratchet_trainer.core.batch import make_micro_batch, make_shared_micro_batch, plan_shared_micro_batches, shared_prefix_tree
from ratchet_trainer.core.config import ConfigError
from ratchet_trainer.core.trainer import resolve_shared_prefix
from helpers import make_cfg, on_policy_batch

KINDS = ["tiny", "real"]
PREAMBLE, TASK = 10, 5  # tokens every sample shares; tokens a group's samples share after it


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


def episode_samples(vocab: int, seed: int = 0) -> list[dict]:
    """Two groups of rollouts as the agent makes them: a preamble common to all, a task prompt per
    group, then per rollout a sampled turn, a tool output (not trained) and a second sampled turn.
    Rollouts 0 and 1 sample the same first two tokens (a trainable common prefix: never shared)."""
    g = torch.Generator().manual_seed(seed)

    def toks(n: int) -> list[int]:
        return torch.randint(1, min(vocab, 5000), (n,), generator=g).tolist()

    preamble = toks(PREAMBLE)
    out = []
    for group, adv in ((0, (1.0, -1.0, 0.5)), (1, (0.25, -0.75))):
        task = toks(TASK)
        same_start = toks(2)
        for r, a in enumerate(adv):
            turn1 = (same_start if r < 2 else toks(2)) + toks(3 + r)
            tool, turn2 = toks(4), toks(2 + group + r)
            ids = preamble + task + turn1 + tool + turn2
            mask = [0] * (PREAMBLE + TASK) + [1] * len(turn1) + [0] * len(tool) + [1] * len(turn2)
            out.append({"input_ids": ids, "loss_mask": mask, "advantage": a, "inference_logprobs": [0.0] * len(ids)})
    return out


def expected_row_length(samples: list[dict]) -> int:
    # The preamble once; each group's task prompt once, less its last token, which every rollout
    # repeats so that its first sampled token is predicted inside its own continuation.
    return PREAMBLE + 2 * (TASK - 1) + sum(len(s["input_ids"]) - (PREAMBLE + TASK - 1) for s in samples)


def test_tree_lays_out_every_sample_once_with_its_own_tokens(tmp_path):
    trainer = Trainer("run", make_cfg("tiny", seq_len=64))
    samples = episode_samples(trainer.vocab_size)
    batch = load_batch(*on_policy_batch(trainer, tmp_path, samples, 0))
    ids = list(range(batch.num_samples))
    src, rows = shared_prefix_tree(batch, ids)
    assert len(src) == expected_row_length(samples) < int(batch.input_ids.numel())
    row_tokens = batch.input_ids[torch.tensor(src)]
    for i, s in enumerate(samples):
        assert row_tokens[torch.tensor(rows[i])].tolist() == s["input_ids"]
    mb = make_shared_micro_batch(batch, ids, trainer.device)
    # Every trainable token is in the row exactly once, with its own sample's advantage.
    assert int(mb.loss_mask.sum()) == int(batch.loss_mask.sum())
    for i, s in enumerate(samples):
        at = mb.loss_mask[0] & (mb.sample_index[0] == i)
        assert int(at.sum()) == sum(s["loss_mask"])
        assert torch.all(mb.advantages[0][at] == s["advantage"])
    # Budgets: one row per group fits 40 tokens; the plan keeps batch order and whole samples.
    plan = plan_shared_micro_batches(batch, ids, 40)
    assert [i for g in plan for i in g] == ids and len(plan) > 1
    assert all(len(shared_prefix_tree(batch, g)[0]) <= 40 for g in plan if len(g) > 1)


def test_shared_row_gives_each_sample_its_own_logits(kind, tmp_path):
    trainer = Trainer("run", make_cfg(kind, seq_len=64))
    batch = load_batch(*on_policy_batch(trainer, tmp_path, episode_samples(trainer.vocab_size), 0))
    ids = list(range(batch.num_samples))
    _, rows = shared_prefix_tree(batch, ids)
    trainer.model.eval()
    with torch.no_grad():
        mb = make_shared_micro_batch(batch, ids, trainer.device)
        shared = trainer.model(**Trainer._forward_args(mb)).logits[0]
        for i in ids:
            alone = make_micro_batch(batch, [i], trainer.device)
            ref = trainer.model(input_ids=alone.input_ids, position_ids=alone.position_ids).logits[0]
            torch.testing.assert_close(shared[torch.tensor(rows[i])], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("loss", [{"kind": "grpo", "normalization": "token"}, {"kind": "gspo"},
                                  {"kind": "grpo", "normalization": "sequence", "kl_coef": 0.1}])
@pytest.mark.parametrize("budget", [4096, 40])
def test_shared_step_equals_padded_step(kind, loss, budget, tmp_path):
    """Loss, metrics and every gradient of a step equal the padded layout's, within fp32 tolerance;
    the shared layout computes fewer tokens, and says so."""
    if kind == "real" and budget == 40:
        pytest.skip("one budget suffices for the real model")
    results = {}
    for shared in (True, False):
        trainer = Trainer("run", make_cfg(kind, seq_len=64, micro_batch_tokens=budget, shared_prefix=shared,
                                          packing=False, loss=loss))
        grads: dict = {}
        apply = trainer.optimizer.step

        def capture(*a, _t=trainer, _g=grads, _apply=apply, **kw):
            _g.update({n: p.grad.detach().clone() for n, p in _t.model.named_parameters() if p.grad is not None})
            return _apply(*a, **kw)

        trainer.optimizer.step = capture
        samples = episode_samples(trainer.vocab_size)
        batch = load_batch(*on_policy_batch(trainer, tmp_path / str(shared), samples, 0))
        results[shared] = (trainer.step(0, batch), grads, batch)
    (ms, gs, batch), (mp, gp, _) = results[True], results[False]
    for k in ("loss", "tokens", "entropy", "kl_ref", "grad_norm"):
        assert ms[k] == pytest.approx(mp[k], rel=1e-4, abs=1e-6), k
    assert gs.keys() == gp.keys() and gs
    for k in gs:
        torch.testing.assert_close(gs[k], gp[k], rtol=1e-3, atol=1e-6)
    total = int(batch.input_ids.numel())
    assert ms["padding_frac"] == 0.0
    if budget == 4096:  # one row: the tree's length, computed independently
        assert ms["processed_tokens"] == expected_row_length(episode_samples(trainer.vocab_size))
        assert ms["processed_tokens"] < total <= mp["processed_tokens"]
    assert ms["processed_per_trained"] == pytest.approx(ms["processed_tokens"] / ms["tokens"])


def test_several_updates_with_shared_prefix_equal_padded(tmp_path):
    # Two mini-batches: the proximal logprobs come from shared rows and are mapped back token by token.
    prox, weights = {}, {}
    for shared in (True, False):
        trainer = Trainer("run", make_cfg("tiny", seq_len=64, minibatches=2, shared_prefix=shared, packing=False,
                                          loss={"correction": "tis"}))
        batch = load_batch(*on_policy_batch(trainer, tmp_path / str(shared), episode_samples(trainer.vocab_size), 0))
        prox[shared] = trainer._proximal_logprobs(0, batch, trainer.cfg.micro_batch_tokens)
        m = trainer.step(0, batch)
        assert m["updates"] == 2
        weights[shared] = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    torch.testing.assert_close(prox[True], prox[False], rtol=1e-5, atol=1e-5)
    # The proximal logprobs are the policy's own: vLLM's here, so every trainable token has one.
    assert torch.all(prox[True][batch.loss_mask] != 0)
    # Adam's steps are ~lr x sign(g): float noise on a near-zero gradient moves a weight by up to ~lr.
    for k in weights[True]:
        torch.testing.assert_close(weights[True][k], weights[False][k], rtol=0, atol=5e-3 * 0.02)


def test_shared_prefix_needs_a_mask_reading_attention():
    with pytest.raises(ConfigError, match="shared_prefix = true and packing"):
        Trainer("run", make_cfg("tiny", shared_prefix=True, packing=True))
    with pytest.raises(ConfigError, match="needs sdpa or eager"):
        resolve_shared_prefix(make_cfg("tiny", shared_prefix=True, packing=False), False, "flex_attention")
    assert resolve_shared_prefix(make_cfg("tiny"), False, "flex_attention") is False  # auto: off there
    with pytest.raises(ConfigError, match="shared_prefix"):
        make_cfg("tiny", shared_prefix="yes")
