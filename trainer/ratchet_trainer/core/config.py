"""The `trainer_config` payload: a plain-dataclass schema with validation.

One schema, two readers: the run config's `[trainer]` section (src/config/schema.ts)
has the same keys, nesting, defaults and choices as these dataclasses, and
src/workflows/trainerConfig.ts passes it through unchanged, adding what other
sections own (CONTEXT_KEYS: `model.path` from `[model]`, `seq_len` from
`[orchestrator]`, `loss.temperature` from `[sampling]`). test/unit/config/schema.test.ts
compares the two through schema() below and fails on any difference.
Where they differed, the values a run sent won (the TypeScript defaults): LoRA rank 8 /
alpha 16, micro_batch_tokens 4096, loss.normalization "dr_grpo".

Older payloads (stored histories, checkpoints' trainer_state.json) spell some keys the old
way; parse_trainer_config accepts them and logs that they are deprecated (LEGACY_SPELLINGS).

Every error names the dotted key, what was wrong and how to fix it. No pydantic:
the GPU benchmark box has only torch/transformers/peft.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

log = logging.getLogger(__name__)

DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ConfigError(ValueError):
    """A trainer_config that cannot be used; the message names the key and the fix."""


class NewerConfigError(ConfigError):
    """A key or a choice this code does not know. A trainer_config is built by the main worker from a
    run config its own schema validated (and keys removed since stay in LEGACY_SPELLINGS), so this means
    a newer build wrote it: the worker hands the run to a newer trainer instead of failing it (docs/upgrades.md)."""


@dataclass(frozen=True)
class LoraConfig:
    rank: int = 8
    alpha: float = 16.0
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
    # torch.compile each decoder layer. Off by default: on RL-shaped batches (a new packed
    # length every micro-batch) it recompiled every few steps on an H100 and had not paid
    # back its compile time after 22 steps, although its steady steps were 1.5x faster
    # (BENCHMARKS.md, "compile on RL-shaped batches"). true: compile; auto: on CUDA only.
    compile: bool | str = False


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
DEFAULT_CLIP = {"grpo": (0.2, 0.28), "gspo": (3e-4, 4e-4), "sft": (0.2, 0.28)}  # sft: no ratio, never used


@dataclass(frozen=True)
class LossConfig:
    # grpo (token-level ratio) | gspo (sequence-level ratio) | sft (supervised: token-level
    # negative log-likelihood of the policy's tokens, advantages and behaviour logprobs unused)
    kind: str = "grpo"
    eps_low: float | None = None  # None: DEFAULT_CLIP[kind]
    eps_high: float | None = None
    # token: mean over all trainable tokens of the batch (DAPO);
    # dr_grpo: sum / (samples * max_tokens), a constant normaliser (Dr. GRPO);
    # sequence: mean per sample, then over samples (original GRPO).
    normalization: str = "dr_grpo"
    max_tokens: int | None = None  # dr_grpo's constant; defaults to seq_len
    kl_coef: float = 0.0  # k3 KL to the reference: the run's start (LoRA: adapter disabled; a warm start: its adapter)
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
        lo, hi = DEFAULT_CLIP[self.kind]
        return (lo if self.eps_low is None else self.eps_low, hi if self.eps_high is None else self.eps_high)


@dataclass(frozen=True)
class GpuConfig:
    # The GPUs the trainer runs on, for `ratchet check`'s memory estimate (src/check/gpu.ts):
    # memory_gib of one GPU, count ranks; devices: the GPUs `ratchet up` starts the ranks on (src/layout).
    # The trainer itself reads none of them.
    memory_gib: float | None = None
    count: int = 1
    devices: tuple[int, ...] | None = None


@dataclass(frozen=True)
class TrainerConfig:
    model: ModelConfig
    # lora: train the adapter `lora` describes (vLLM loads it at run time); full: every weight.
    mode: str = "lora"
    lora: LoraConfig = field(default_factory=LoraConfig)
    ac: AcConfig = field(default_factory=AcConfig)
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
    micro_batch_tokens: int = 4096
    # "auto": packed on CUDA, padded on the CPU, where SDPA's math kernel computes a
    # packed row's full [L, L] scores (measured slower than padding; BENCHMARKS.md).
    packing: bool | str = "auto"
    # Samples that share a token prefix (the episode's preamble, a group's prompt) in one row as a
    # prefix tree: the prefix computed once (batch.py). "auto": on where packing is off and the
    # attention reads a 4-D mask (sdpa, eager); the loss and gradients are the padded layout's.
    shared_prefix: bool | str = "auto"
    # Logprobs from the last hidden states, this many tokens at a time, without
    # materialising [tokens x vocab] logits; 0 = from the model's full logits.
    logprob_chunk_tokens: int = 1024
    device: str = "auto"
    seed: int = 0
    gpu: GpuConfig = field(default_factory=GpuConfig)
    # Several ranks (torchrun): replicate the model on every rank and sum the trainable gradients
    # once per optimiser step, or shard it with FSDP2. auto: replicate when the one-GPU memory
    # estimate fits every rank's free GPU memory (parallelism.py, docs/gpu.md). One process ignores it.
    parallelism: str = "auto"

    @property
    def adapter(self) -> LoraConfig | None:
        """The LoRA adapter this run trains; None in full fine-tuning."""
        return self.lora if self.mode == "lora" else None

    def model_fingerprint(self) -> str:
        """Hash of what a checkpoint's tensors depend on: the architecture and LoRA shape.

        Optimiser settings, loss and batch shape may change between resumes; the
        model identity and adapter layout may not.
        """
        ident = {
            "path": self.model.path,
            "config": dict(self.model.config) if self.model.config is not None else None,
            "lora": dataclasses.asdict(self.adapter) if self.adapter else None,
        }
        return hashlib.sha256(json.dumps(ident, sort_keys=True, default=list).encode()).hexdigest()[:16]

    @property
    def updates_per_batch(self) -> int:
        return self.minibatches * self.epochs

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self), default=list))


# The allowed values of each string key, by dotted key; the TypeScript schema's enums must match.
CHOICES: dict[str, tuple[str, ...]] = {
    "mode": ("lora", "full"),
    "model.dtype": ("auto", "bfloat16", "float16", "float32"),
    "model.attn_implementation": ("auto", "sdpa", "eager", "flex_attention", "flash_attention_2"),
    "model.lora_dtype": ("auto", "float32"),
    "loss.kind": ("grpo", "gspo", "sft"),
    "loss.normalization": ("token", "sequence", "dr_grpo"),
    "loss.correction": ("tis", "icepop", "mask", "none"),
    "device": ("auto", "cpu", "cuda"),
    "parallelism": ("auto", "replicate", "fsdp"),
}

# Keys the run config does not set in [trainer]: src/workflows/trainerConfig.ts fills them
# from other sections; model.config (a random model from an HF config dict) is for tests and benchmarks.
CONTEXT_KEYS = ("model.path", "model.config", "seq_len", "loss.temperature")

# Spellings of earlier payloads, still accepted (a stored history's trainer.load, a checkpoint's
# trainer_state.json): the old key or value, what it is now. Logged as deprecated when seen; they
# can go once no run started before the rename can still schedule a trainer.load.
LEGACY_SPELLINGS = {
    "model.lora": "lora (null: mode = \"full\")",
    "model.ac": "ac",
    "loss.type": "loss.kind",
    "loss.normalization = \"sequence_mean\"": "loss.normalization = \"sequence\"",
}


def _key(where: str, key: str = "") -> str:
    return ".".join(p for p in ("trainer_config", where, key) if p)


def _take(d: Mapping[str, Any], cls: type, where: str) -> dict[str, Any]:
    if not isinstance(d, Mapping):
        raise ConfigError(f"{_key(where)} must be an object, got {type(d).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise NewerConfigError(
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
        raise NewerConfigError(f"{_key(where, key)} must be one of {list(choices)}, got {d[key]!r}")


def _choices(d: dict[str, Any], where: str) -> None:
    prefix = f"{where}." if where else ""
    for dotted, choices in CHOICES.items():
        if dotted.startswith(prefix) and "." not in dotted[len(prefix):]:
            _choice(d, dotted[len(prefix):], where, choices)


def _deprecated(old: str) -> None:
    log.warning("trainer_config: %s is deprecated; use %s", old, LEGACY_SPELLINGS[old])


def _upgrade(raw: Mapping[str, Any]) -> dict[str, Any]:
    """An earlier payload's spellings in today's (LEGACY_SPELLINGS); the values are kept as they are."""
    top = dict(raw)
    model = top.get("model")
    if isinstance(model, Mapping) and ("lora" in model or "ac" in model):
        model = dict(model)
        if "lora" in model:
            _deprecated("model.lora")
            if "lora" in top or "mode" in top:
                raise ConfigError("trainer_config: model.lora (the old spelling) and lora/mode are both set. Fix: keep lora and mode")
            lora = model.pop("lora")
            top["mode"] = "full" if lora is None else "lora"
            if lora is not None:
                top["lora"] = lora
        if "ac" in model:
            _deprecated("model.ac")
            if "ac" in top:
                raise ConfigError("trainer_config: model.ac (the old spelling) and ac are both set. Fix: keep ac")
            top["ac"] = model.pop("ac")
        top["model"] = model
    loss = top.get("loss")
    if isinstance(loss, Mapping) and ("type" in loss or loss.get("normalization") == "sequence_mean"):
        loss = dict(loss)
        if "type" in loss:
            _deprecated("loss.type")
            if "kind" in loss:
                raise ConfigError("trainer_config.loss: type (the old spelling) and kind are both set. Fix: keep kind")
            loss["kind"] = loss.pop("type")
        if loss.get("normalization") == "sequence_mean":
            _deprecated("loss.normalization = \"sequence_mean\"")
            loss["normalization"] = "sequence"
        top["loss"] = loss
    return top


def parse_trainer_config(raw: Mapping[str, Any]) -> TrainerConfig:
    """Validate a trainer_config payload; raise ConfigError naming the offending key."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"trainer_config must be an object, got {type(raw).__name__}")
    top = _take(_upgrade(raw), TrainerConfig, "")
    if "model" not in top:
        raise ConfigError("trainer_config.model is required: give model.path (a local HF directory) or model.config")

    m = _take(top["model"], ModelConfig, "model")
    if (m.get("path") is None) == (m.get("config") is None):
        raise ConfigError("trainer_config.model needs exactly one of `path` (local HF directory) or `config` (HF config dict)")
    if m.get("path") is not None and not isinstance(m["path"], str):
        raise ConfigError(f"trainer_config.model.path must be a string, got {m['path']!r}")
    _choices(m, "model")
    if "compile" in m and not (isinstance(m["compile"], bool) or m["compile"] == "auto"):
        raise ConfigError(f"trainer_config.model.compile must be true, false or \"auto\", got {m['compile']!r}")
    model = ModelConfig(**m)

    ac = _take(top.get("ac", {}) or {}, AcConfig, "ac")
    _num(ac, "freq", "ac", int, lo=0)
    lo = _take(top.get("lora", {}) or {}, LoraConfig, "lora")
    _num(lo, "rank", "lora", int, lo=1)
    _num(lo, "alpha", "lora", float, lo=0, lo_open=True)
    _num(lo, "dropout", "lora", float, lo=0, hi=1)
    if "target_modules" in lo:
        tm = lo["target_modules"]
        if not isinstance(tm, (list, tuple)) or not tm or not all(isinstance(x, str) for x in tm):
            raise ConfigError(f"trainer_config.lora.target_modules must be a non-empty list of module names, got {tm!r}")
        lo["target_modules"] = tuple(tm)

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
    _choices(lc, "loss")
    for k in ("eps_low", "eps_high"):
        if k in lc and lc[k] is None:
            del lc[k]  # null: the loss type's default
    _num(lc, "eps_low", "loss", float, lo=0, hi=1)
    _num(lc, "eps_high", "loss", float, lo=0)
    _num(lc, "kl_coef", "loss", float, lo=0)
    _num(lc, "mismatch_tolerance", "loss", float, lo=0)
    _num(lc, "temperature", "loss", float, lo=0, lo_open=True)
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
    if loss.kind == "gspo" and max(loss.clip_range()) > 0.05:
        raise ConfigError(f"trainer_config.loss: eps_low/eps_high {loss.clip_range()} are a token-ratio (PPO) range, but "
                          "loss.kind is 'gspo', whose sequence ratio (exp of a mean log-ratio) moves ~1000x less, so the clip would never act. "
                          "Fix: omit eps_low/eps_high (GSPO defaults 3e-4/4e-4) or set values below 0.05")

    _num(top, "seq_len", "", int, lo=2)
    _num(top, "micro_batch_tokens", "", int, lo=1)
    _num(top, "minibatches", "", int, lo=1, hi=1024)
    _num(top, "epochs", "", int, lo=1, hi=100)
    _num(top, "logprob_chunk_tokens", "", int, lo=0)
    _num(top, "seed", "", int, lo=0)
    if "packing" in top and not (isinstance(top["packing"], bool) or top["packing"] == "auto"):
        raise ConfigError(f"trainer_config.packing must be true, false or \"auto\", got {top['packing']!r}")
    if "shared_prefix" in top and not (isinstance(top["shared_prefix"], bool) or top["shared_prefix"] == "auto"):
        raise ConfigError(f"trainer_config.shared_prefix must be true, false or \"auto\", got {top['shared_prefix']!r}. "
                          "Fix: true, false or \"auto\"")
    _choices(top, "")
    g = _take(top.get("gpu", {}) or {}, GpuConfig, "gpu")
    if g.get("memory_gib") is not None:
        _num(g, "memory_gib", "gpu", float, lo=0, lo_open=True)
    _num(g, "count", "gpu", int, lo=1)
    if g.get("devices") is not None:
        if not isinstance(g["devices"], (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in g["devices"]):
            raise ConfigError(f"{_key('gpu.devices')} must be a list of GPU indices (integers >= 0), got {g['devices']!r}. Fix: e.g. devices = [0, 1]")
        g["devices"] = tuple(g["devices"])
    top.update(model=model, lora=LoraConfig(**lo), ac=AcConfig(**ac), optim=optim, loss=loss, gpu=GpuConfig(**g))
    cfg = TrainerConfig(**top)
    if cfg.loss.normalization == "dr_grpo" and cfg.loss.max_tokens is not None and cfg.loss.max_tokens < 1:
        raise ConfigError("trainer_config.loss.max_tokens must be >= 1")
    return cfg


def newer_than_this_code(raw: Any) -> str | None:
    """Why this trainer_config comes from a newer build (a key or a choice this code does not know), or None."""
    try:
        parse_trainer_config(raw)
    except NewerConfigError as e:
        return str(e)
    except ConfigError:
        return None
    return None


def schema() -> dict[str, Any]:
    """Every key with its default (nested as in the payload) and the choices of each string key:
    what test/unit/config/schema.test.ts compares with the TypeScript schema."""
    defaults = TrainerConfig(model=ModelConfig()).to_dict()
    return {"defaults": defaults, "choices": {k: list(v) for k, v in CHOICES.items()}, "context_keys": list(CONTEXT_KEYS)}

