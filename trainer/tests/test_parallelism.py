"""The trainer's choice between replicating and sharding across ranks (parallelism.py)."""

import pytest
import torch

from helpers import make_cfg
from ratchet_trainer.core.config import ConfigError
from ratchet_trainer.core.parallelism import GIB, choose_parallelism, one_gpu_bytes

QWEN3_8B = {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
            "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "tie_word_embeddings": False}


def test_the_one_gpu_estimate_is_ratchet_checks():
    """Seed 001's shape (Qwen3-8B, LoRA r=4, checkpointing, 4,096-token rows): test/unit/check/gpu.test.ts
    computes 19.648 GiB allocated by hand (8,190,735,360 bf16 weights, 18 bytes for each of 10,911,744
    adapter parameters, 36 checkpointed layer inputs and one recomputed layer, one 1,024-token logprob chunk)."""
    cfg = make_cfg("tiny", lora={"rank": 4, "alpha": 8}, ac={"freq": 1}, seq_len=1024, micro_batch_tokens=4096)
    allocated = 2 * 8_190_735_360 + 18 * 10_911_744 + 4096 * (36 * 8192 + 200_704) + 1024 * 151_936 * 16
    assert allocated / GIB == pytest.approx(19.648, abs=0.001)
    assert one_gpu_bytes(cfg, QWEN3_8B) == pytest.approx(allocated * 1.1 + GIB)


def test_full_fine_tuning_counts_bf16_adamw_and_uncheckpointed_layers_everything():
    cfg = make_cfg("tiny", mode="full", ac={"freq": 0}, seq_len=4096, micro_batch_tokens=4096)
    params = 8_190_735_360
    allocated = 8 * params + 4096 * 36 * 200_704 + 1024 * 151_936 * 16
    assert one_gpu_bytes(cfg, QWEN3_8B) == pytest.approx(allocated * 1.1 + GIB)


def test_one_process_is_single_and_a_named_choice_is_kept():
    cpu = torch.device("cpu")
    assert choose_parallelism(make_cfg("tiny", parallelism="replicate"), 1, cpu) == "single"
    assert choose_parallelism(make_cfg("tiny", parallelism="replicate"), 4, cpu) == "replicate"
    assert choose_parallelism(make_cfg("tiny", parallelism="fsdp"), 4, cpu) == "fsdp"
    assert choose_parallelism(make_cfg("tiny"), 4, cpu) == "fsdp"  # CPU ranks: the gloo tests' sharded path


def test_an_unknown_parallelism_names_the_key_and_the_choices():
    with pytest.raises(ConfigError, match=r"trainer_config.parallelism must be one of \['auto', 'replicate', 'fsdp'\], got 'ddp'"):
        make_cfg("tiny", parallelism="ddp")
