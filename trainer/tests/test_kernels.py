"""Kernel options: chosen per device, and rejected clearly before any model is built."""

import pytest
import torch

from helpers import make_cfg
from ratchet_trainer.core import Trainer
from ratchet_trainer.core.config import ConfigError, parse_trainer_config
from ratchet_trainer.core.model import resolve_attn_implementation


def test_auto_attention_is_flex_for_packed_cuda_and_sdpa_elsewhere():
    cfg = make_cfg("tiny")
    assert cfg.model.attn_implementation == "auto"
    assert resolve_attn_implementation(cfg, torch.device("cuda"), True) == "flex_attention"
    assert resolve_attn_implementation(cfg, torch.device("cuda"), False) == "sdpa"
    assert resolve_attn_implementation(cfg, torch.device("cpu"), True) == "sdpa"


def test_unknown_attention_kernel_names_the_key():
    with pytest.raises(ConfigError, match=r"trainer_config\.model\.attn_implementation must be one of"):
        parse_trainer_config({"model": {"config": {"model_type": "llama"}, "attn_implementation": "flash3"}})
    with pytest.raises(ConfigError, match=r"trainer_config\.model\.lora_dtype must be one of"):
        parse_trainer_config({"model": {"config": {"model_type": "llama"}, "lora_dtype": "bf16"}})
    with pytest.raises(ConfigError, match=r"trainer_config\.logprob_chunk_tokens must be >= 0"):
        parse_trainer_config({"model": {"config": {"model_type": "llama"}}, "logprob_chunk_tokens": -1})


@pytest.mark.parametrize("attn,msg", [("flex_attention", "backward torch runs on CUDA only"),
                                      ("flash_attention_2", "runs on CUDA only")])
def test_kernel_the_device_cannot_run_fails_before_the_model_is_built(attn, msg, monkeypatch):
    import ratchet_trainer.core.trainer as trainer_mod

    built = []
    monkeypatch.setattr(trainer_mod, "build_model", lambda *a, **k: built.append(1))
    with pytest.raises(ConfigError, match=msg):
        Trainer("run", make_cfg("tiny", model={"attn_implementation": attn}))
    assert built == []


def test_packed_flex_attention_equals_padded_sdpa_forward():
    """FlexAttention's document mask (built by transformers from restarting position ids) keeps
    samples apart: a packed row's logits equal each sample run alone. Forward only: torch has no
    FlexAttention backward on the CPU (the GPU benchmark compares the training steps).
    Slow on the CPU (~2 min): FlexAttention compiles through inductor."""
    from ratchet_trainer.core.model import build_base

    model = build_base(make_cfg("tiny", mode="full"), torch.device("cpu"), "sdpa").eval()
    g = torch.Generator().manual_seed(0)
    lens = [20, 13, 31]
    ids = [torch.randint(0, 256, (n,), generator=g) for n in lens]
    with torch.no_grad():
        alone = [model(input_ids=x[None], position_ids=torch.arange(len(x))[None]).logits[0] for x in ids]
        model.set_attn_implementation("flex_attention")
        packed = model(input_ids=torch.cat(ids)[None],
                       position_ids=torch.cat([torch.arange(n) for n in lens])[None]).logits[0]
    for a, b in zip(alone, torch.split(packed, lens)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
