"""The `trainer_config` payload: a plain-dataclass schema with validation.

The TypeScript run config passes these keys through unchanged (snake_case), so
every error names the dotted key, what was wrong and how to fix it. No pydantic:
the GPU benchmark box has only torch/transformers/peft.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ConfigError(ValueError):
    """A trainer_config that cannot be used; the message names the key and the fix."""


@dataclass(frozen=True)
class LoraConfig:
    rank: int = 4
    alpha: float = 8.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = DEFAULT_TARGET_MODULES


@dataclass(frozen=True)
class AcConfig:
    # Checkpoint every `freq`-th decoder layer; 0 turns activation checkpointing off.
    freq: int = 0


@dataclass(frozen=True)
class ModelConfig:
    # A local HF directory (weights + config). Exactly one of path / config.
    path: str | None = None
    # An HF config dict to build a randomly initialised model (tests, benchmarks).
    config: Mapping[str, Any] | None = None
    dtype: str = "auto"  # auto = bfloat16 on cuda, float32 on cpu
    # auto: FlexAttention (document mask) for packed rows on CUDA, SDPA otherwise.
    attn_implementation: str = "auto"
    # LoRA compute precision. auto: the base model's dtype (bf16 on GPU) with fp32 master
    # weights in the optimiser; float32: adapters compute in fp32 (peft's default, slower).
    # Not part of the model fingerprint: it changes arithmetic, not the checkpoint's tensors.
    lora_dtype: str = "auto"
    # torch.compile each decoder layer. auto: on CUDA (1.4-1.6x on an H100, BENCHMARKS.md),
    # off on the CPU (compiling costs more than it saves on small test models).
    compile: bool | str = "auto"
    ac: AcConfig = field(default_factory=AcConfig)
    lora: LoraConfig | None = field(default_factory=LoraConfig)


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    max_grad_norm: float = 1.0  # 0 disables clipping


# Clip ranges follow the loss: PPO/GRPO clip a token ratio (0.2/0.28, DAPO's
# clip-higher); GSPO clips a sequence ratio, the exp of a mean log-ratio, whose
# published ranges are three orders of magnitude smaller (Zheng et al. 2025).
DEFAULT_CLIP = {"grpo": (0.2, 0.28), "gspo": (3e-4, 4e-4)}


@dataclass(frozen=True)
class LossConfig:
    type: str = "grpo"  # grpo (token-level ratio) | gspo (sequence-level ratio)
    eps_low: float | None = None  # None: DEFAULT_CLIP[type]
    eps_high: float | None = None
    # token: mean over all trainable tokens of the batch (DAPO);
    # dr_grpo: sum / (samples * max_tokens), a constant normaliser (Dr. GRPO);
    # sequence_mean: mean per sample, then over samples (original GRPO).
    normalization: str = "token"
    max_tokens: int | None = None  # dr_grpo's constant; defaults to seq_len
    kl_coef: float = 0.0  # k3 KL to the reference (LoRA: adapter disabled)
    # mean |ratio - 1| above this is reported as `mismatch_exceeded`.
    mismatch_tolerance: float = 0.05
    # The sampling temperature of the run: logits are divided by it before they
    # become logprobs, so the trainer scores the distribution vLLM sampled from.
    temperature: float = 1.0
    # How the train/inference mismatch is bounded (loss.py; docs/training.md has the table).
    # Three policies: behaviour (vLLM's logprobs, from the batch), proximal (the trainer's
    # policy before the batch's first update) and current.
    # tis: decoupled; the PPO/GSPO ratio is current/proximal, and each token is weighted
    #      by min(pi_proximal / pi_vllm, tis_cap): truncated importance sampling;
    # icepop: decoupled; the ratio is current/proximal, each token weighted by
    #      pi_proximal / pi_vllm and dropped when that is outside [icepop_low, icepop_high];
    # mask: the ratio against vLLM's logprobs, tokens whose |log pi_proximal - log pi_vllm|
    #       exceeds mask_threshold are dropped from the loss;
    # none: the ratio against vLLM's logprobs as is (dual clip and floor masking still apply).
    # With one update per batch (minibatches = epochs = 1) proximal = current, so under tis
    # and icepop the ratio is 1 and the clips (eps_low/eps_high/dual_clip) cannot act.
    correction: str = "tis"
    tis_cap: float = 2.0
    mask_threshold: float = 1.0  # nats
    icepop_low: float = 0.5
    icepop_high: float = 2.0
    # Dual clip (Ye et al. 2020): for a negative advantage the objective is bounded
    # below by dual_clip * A, so a token the trainer finds far likelier than the
    # sampler did cannot get an unbounded gradient. 0 turns it off.
    dual_clip: float = 3.0

    def clip_range(self) -> tuple[float, float]:
        lo, hi = DEFAULT_CLIP[self.type]
        return (lo if self.eps_low is None else self.eps_low, hi if self.eps_high is None else self.eps_high)


@dataclass(frozen=True)
class TrainerConfig:
    model: ModelConfig
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    seq_len: int = 1024
    # Optimiser updates per batch: its trajectories split into `minibatches` parts, one
    # update each, repeated `epochs` times (verl's ppo_mini_batch / ppo_epochs). With more
    # than one update, the proximal policy's logprobs are computed once, with no gradient,
    # before the first update, and the clip bounds each update against it (loss.correction).
    minibatches: int = 1
    epochs: int = 1
    # Tokens per forward/backward; gradients accumulate over micro-batches.
    # packing: one row of concatenated samples (no padding); otherwise rows * longest row.
    micro_batch_tokens: int = 8192
    # "auto": packed on CUDA, padded on the CPU, where SDPA's math kernel computes a
    # packed row's full [L, L] scores (measured slower than padding; BENCHMARKS.md).
    packing: bool | str = "auto"
    # Logprobs from the last hidden states, this many tokens at a time, without
    # materialising [tokens x vocab] logits; 0 = from the model's full logits.
    logprob_chunk_tokens: int = 1024
    device: str = "auto"
    seed: int = 0

    def model_fingerprint(self) -> str:
        """Hash of what a checkpoint's tensors depend on: the architecture and LoRA shape.

        Optimiser settings, loss and batch shape may change between resumes; the
        model identity and adapter layout may not.
        """
        ident = {
            "path": self.model.path,
            "config": dict(self.model.config) if self.model.config is not None else None,
            "lora": dataclasses.asdict(self.model.lora) if self.model.lora else None,
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True, default=list).encode()).hexdigest()[:16]

    @property
    def updates_per_batch(self) -> int:
        return self.minibatches * self.epochs

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self), default=list))


_LOSS_TYPES = ("grpo", "gspo")
_CORRECTIONS = ("tis", "icepop", "mask", "none")
_NORMALIZATIONS = ("token", "dr_grpo", "sequence_mean")
_DTYPES = ("auto", "bfloat16", "float16", "float32")
_DEVICES = ("auto", "cpu", "cuda")
_ATTN = ("auto", "sdpa", "eager", "flex_attention", "flash_attention_2")
_LORA_DTYPES = ("auto", "float32")


def _key(where: str, key: str = "") -> str:
    return ".".join(p for p in ("trainer_config", where, key) if p)


def _take(d: Mapping[str, Any], cls: type, where: str) -> dict[str, Any]:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{_key(where)} must be an object, got {type(d).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ConfigError(
            f"{_key(where)}: unknown key(s) {unknown}; allowed keys are {sorted(known)} "
            "(see trainer/README.md)"
        )
    return dict(d)


def _num(d: dict[str, Any], key: str, where: str, kind: type, lo: float | None = None, hi: float | None = None,
         lo_open: bool = False) -> None:
    if key not in d:
        return
    v = d[key]
    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    if not ok:
        raise ConfigError(f"{_key(where, key)} must be a{'n integer' if kind is int else ' number'}, got {v!r}")
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ConfigError(f"{_key(where, key)} must be {'>' if lo_open else '>='} {lo}, got {v!r}")
    if hi is not None and v > hi:
        raise ConfigError(f"{_key(where, key)} must be <= {hi}, got {v!r}")
    d[key] = kind(v)


def _choice(d: dict[str, Any], key: str, where: str, choices: tuple[str, ...]) -> None:
    if key in d and d[key] not in choices:
        raise ConfigError(f"{_key(where, key)} must be one of {list(choices)}, got {d[key]!r}")


def parse_trainer_config(raw: Mapping[str, Any]) -> TrainerConfig:
    """Validate a trainer_config payload; raise ConfigError naming the offending key."""
    top = _take(raw, TrainerConfig, "")
    if "model" not in top:
        raise ConfigError("trainer_config.model is required: give model.path (a local HF directory) or model.config")

    m = _take(top["model"], ModelConfig, "model")
    if (m.get("path") is None) == (m.get("config") is None):
        raise ConfigError("trainer_config.model needs exactly one of `path` (local HF directory) or `config` (HF config dict)")
    if m.get("path") is not None and not isinstance(m["path"], str):
        raise ConfigError(f"trainer_config.model.path must be a string, got {m['path']!r}")
    _choice(m, "dtype", "model", _DTYPES)
    _choice(m, "attn_implementation", "model", _ATTN)
    _choice(m, "lora_dtype", "model", _LORA_DTYPES)
    if "compile" in m and not (isinstance(m["compile"], bool) or m["compile"] == "auto"):
        raise ConfigError(f"trainer_config.model.compile must be true, false or \"auto\", got {m['compile']!r}")
    ac = _take(m.get("ac", {}) or {}, AcConfig, "model.ac")
    _num(ac, "freq", "model.ac", int, lo=0)
    m["ac"] = AcConfig(**ac)
    if "lora" in m and m["lora"] is None:
        m["lora"] = None
    else:
        lo = _take(m.get("lora", {}) or {}, LoraConfig, "model.lora")
        _num(lo, "rank", "model.lora", int, lo=1)
        _num(lo, "alpha", "model.lora", float, lo=0, lo_open=True)
        _num(lo, "dropout", "model.lora", float, lo=0, hi=1)
        if "target_modules" in lo:
            tm = lo["target_modules"]
            if not isinstance(tm, (list, tuple)) or not tm or not all(isinstance(x, str) for x in tm):
                raise ConfigError(f"trainer_config.model.lora.target_modules must be a non-empty list of module names, got {tm!r}")
            lo["target_modules"] = tuple(tm)
        m["lora"] = LoraConfig(**lo)
    model = ModelConfig(**m)

    o = _take(top.get("optim", {}) or {}, OptimConfig, "optim")
    _num(o, "lr", "optim", float, lo=0)  # 0: a control run that samples and scores but never moves
    _num(o, "weight_decay", "optim", float, lo=0)
    _num(o, "eps", "optim", float, lo=0, lo_open=True)
    _num(o, "max_grad_norm", "optim", float, lo=0)
    if "betas" in o:
        b = o["betas"]
        if not (isinstance(b, (list, tuple)) and len(b) == 2 and all(isinstance(x, (int, float)) and 0 <= x < 1 for x in b)):
            raise ConfigError(f"trainer_config.optim.betas must be two numbers in [0, 1), got {b!r}")
        o["betas"] = (float(b[0]), float(b[1]))
    optim = OptimConfig(**o)

    lc = _take(top.get("loss", {}) or {}, LossConfig, "loss")
    _choice(lc, "type", "loss", _LOSS_TYPES)
    _choice(lc, "normalization", "loss", _NORMALIZATIONS)
    for k in ("eps_low", "eps_high"):
        if k in lc and lc[k] is None:
            del lc[k]  # null: the loss type's default
    _num(lc, "eps_low", "loss", float, lo=0, hi=1)
    _num(lc, "eps_high", "loss", float, lo=0)
    _num(lc, "kl_coef", "loss", float, lo=0)
    _num(lc, "mismatch_tolerance", "loss", float, lo=0)
    _num(lc, "temperature", "loss", float, lo=0, lo_open=True)
    _choice(lc, "correction", "loss", _CORRECTIONS)
    _num(lc, "tis_cap", "loss", float, lo=1)
    _num(lc, "mask_threshold", "loss", float, lo=0, lo_open=True)
    _num(lc, "dual_clip", "loss", float, lo=0)
    _num(lc, "icepop_low", "loss", float, lo=0, hi=1, lo_open=True)
    _num(lc, "icepop_high", "loss", float, lo=1)
    if lc.get("dual_clip") not in (None, 0.0) and lc["dual_clip"] <= 1:
        raise ConfigError(f"trainer_config.loss.dual_clip must be 0 (off) or > 1, got {lc['dual_clip']!r}: "
                          "a bound at or below 1 x A would cut the ordinary clipped objective")
    if lc.get("max_tokens") is not None:
        _num(lc, "max_tokens", "loss", int, lo=1)
    loss = LossConfig(**lc)
    if loss.type == "gspo" and max(loss.clip_range()) > 0.05:
        raise ConfigError(f"trainer_config.loss: eps_low/eps_high {loss.clip_range()} are a token-ratio (PPO) range, but "
                          "loss.type is 'gspo', whose sequence ratio (exp of a mean log-ratio) moves ~1000x less, so the clip would never act. "
                          "Fix: omit eps_low/eps_high (GSPO defaults 3e-4/4e-4) or set values below 0.05")

    _num(top, "seq_len", "", int, lo=2)
    _num(top, "micro_batch_tokens", "", int, lo=1)
    _num(top, "minibatches", "", int, lo=1, hi=1024)
    _num(top, "epochs", "", int, lo=1, hi=100)
    _num(top, "logprob_chunk_tokens", "", int, lo=0)
    _num(top, "seed", "", int, lo=0)
    if "packing" in top and not (isinstance(top["packing"], bool) or top["packing"] == "auto"):
        raise ConfigError(f"trainer_config.packing must be true, false or \"auto\", got {top['packing']!r}")
    _choice(top, "device", "", _DEVICES)
    top.update(model=model, optim=optim, loss=loss)
    cfg = TrainerConfig(**top)
    if cfg.loss.normalization == "dr_grpo" and cfg.loss.max_tokens is not None and cfg.loss.max_tokens < 1:
        raise ConfigError("trainer_config.loss.max_tokens must be >= 1")
    return cfg
