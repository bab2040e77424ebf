"""Model construction: base model (local HF dir or random init from a config), LoRA, checkpointing."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

from .config import ConfigError, TrainerConfig

log = logging.getLogger(__name__)


def resolve_device(cfg: TrainerConfig) -> torch.device:
    if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("trainer_config.device is 'cuda' but torch sees no GPU. Fix: set device to 'auto' or 'cpu'")
        return torch.device("cuda")
    return torch.device("cpu")


def resolve_dtype(cfg: TrainerConfig, device: torch.device) -> torch.dtype:
    if cfg.model.dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, cfg.model.dtype)


# Attention kernels a config may name, besides "auto".
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flex_attention", "flash_attention_2")


def resolve_attn_implementation(cfg: TrainerConfig, device: torch.device, packing: bool) -> str:
    """`auto`: FlexAttention with a document mask for packed rows on CUDA (it skips the blocks
    between samples); SDPA otherwise (the CPU, and padded rows, which have nothing to skip)."""
    impl = cfg.model.attn_implementation
    if impl != "auto":
        return impl
    return "flex_attention" if device.type == "cuda" and packing else "sdpa"


def check_kernel_support(cfg: TrainerConfig, device: torch.device, attn: str) -> None:
    """Reject kernel options this machine cannot run, before any model is built or changed."""
    key = "trainer_config.model.attn_implementation"
    if attn == "flex_attention":
        try:
            from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
        except ImportError as e:
            raise ConfigError(f"{key} is 'flex_attention' but torch {torch.__version__} has no FlexAttention ({e}). "
                              "Fix: use 'auto' or 'sdpa', or torch >= 2.5") from e
        if device.type != "cuda":
            raise ConfigError(f"{key} is 'flex_attention', whose backward torch runs on CUDA only, and the device is "
                              f"{device.type}. Fix: use 'auto' (SDPA on the CPU) or 'sdpa'")
        if torch.cuda.get_device_capability(device) < (8, 0):
            raise ConfigError(f"{key} is 'flex_attention', which needs a GPU of compute capability >= 8.0; "
                              f"{torch.cuda.get_device_name(device)} has {torch.cuda.get_device_capability(device)}. "
                              "Fix: use 'auto' or 'sdpa'")
    elif attn == "flash_attention_2":
        import importlib.util

        if device.type != "cuda":
            raise ConfigError(f"{key} is 'flash_attention_2', which runs on CUDA only, and the device is {device.type}. "
                              "Fix: use 'auto' or 'sdpa'")
        if importlib.util.find_spec("flash_attn") is None:
            raise ConfigError(f"{key} is 'flash_attention_2' but the flash_attn package is not installed. "
                              "Fix: use 'auto' (FlexAttention on CUDA) or install flash-attn")
    dtype = resolve_dtype(cfg, device)
    if dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"trainer_config.model.dtype resolves to bfloat16, which {torch.cuda.get_device_name(device)} "
                          "does not support. Fix: set model.dtype to 'float16' or 'float32'")


def set_attn_implementation(model: nn.Module, attn: str) -> None:
    """Switch an already-built model's attention kernel (the benchmark reuses one base model)."""
    conf = getattr(model, "config", None)
    if conf is not None and getattr(conf, "_attn_implementation", attn) != attn:
        model.set_attn_implementation(attn)


def chunked_head_supported(model: nn.Module) -> bool:
    """Chunked logprobs apply the output projection themselves: only valid when the model's
    logits are exactly `lm_head(last_hidden_state)` (no soft-capping or scaling, a plain Linear head)."""
    causal = model.get_base_model() if hasattr(model, "get_base_model") else model
    conf = getattr(causal, "config", None)
    if conf is None or not hasattr(causal, "get_decoder"):
        return False
    if getattr(conf, "final_logit_softcapping", None) or getattr(conf, "logit_scale", None) not in (None, 1, 1.0):
        log.info("logits are post-processed by this model; logprobs from full logits")
        return False
    head = causal.get_output_embeddings()
    return type(head) is nn.Linear


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def apply_activation_checkpointing(model: nn.Module, freq: int) -> int:
    """Checkpoint every `freq`-th decoder layer (freq 1 = all, 0 = none). Returns how many."""
    if freq <= 0:
        if getattr(model, "is_gradient_checkpointing", False):
            model.gradient_checkpointing_disable()
        return 0
    # Non-reentrant checkpointing needs no input that requires grad, which LoRA lacks.
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    layers = decoder_layers(model)
    for i, layer in enumerate(layers):
        layer.gradient_checkpointing = i % freq == 0
    return sum(1 for layer in layers if layer.gradient_checkpointing)


# How the decoder layers are compiled (BENCHMARKS.md, "compile on RL-shaped batches"):
# None is dynamo's default (static shapes, then dynamic after the first change of
# length). dynamic=True (symbolic lengths from the first call) was measured on Qwen3-8B
# with RL-shaped batches: its first step took 104 s against 51 s, and it still recompiled
# on the second batch, so it is not the default.
COMPILE_DYNAMIC: bool | None = None


class _CompileWatch(logging.Filter):
    """Makes dynamo's silent give-up loud.

    When a frame is recompiled `recompile_limit` times, dynamo logs one warning on
    `torch._dynamo.convert_frame` and from then on runs that code eagerly: the
    layers keep working, only slower, and nothing in the step says so. This filter
    counts those events, logs them as errors on the trainer's logger (with
    dynamo's reason), and `compile_stats()` reports the count in every step's metrics.
    """

    def __init__(self) -> None:
        super().__init__()
        self.limit_hits = 0
        self.last_reason = ""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if "hit config." in msg and "recompile_limit" in msg:
            self.limit_hits += 1
            self.last_reason = msg.replace("\n", " | ")[:600]
            log.error("torch.compile hit its recompile limit: the decoder layers now run EAGER (uncompiled) for the "
                      "rest of this process. Fix: report the reason below; set trainer_config.model.compile = false "
                      "to run eager on purpose", extra={"dynamo": self.last_reason})
        return True


COMPILE_WATCH = _CompileWatch()


def compile_stats() -> dict[str, int]:
    """Graphs dynamo has compiled in this process, and how often it gave up (recompile limit)."""
    from torch._dynamo.utils import counters

    return {"compile_graphs": int(counters["stats"]["unique_graphs"]), "compile_limit_hits": COMPILE_WATCH.limit_hits}


def _input_requires_grad(module: nn.Module, args, output):  # noqa: ANN001
    if torch.is_grad_enabled() and isinstance(output, torch.Tensor) and not output.requires_grad:
        output.requires_grad_(True)


def compile_layers(model: nn.Module, dynamic: bool | None = None) -> int:
    """torch.compile every decoder layer in place (the layers repeat, so one graph serves all).

    One graph needs every layer called alike. With a frozen embedding (LoRA) the
    first layer's input does not require grad while every later layer's does, a
    guard mismatch that compiled a second graph (and, with shape changes, walked
    into the recompile limit); the embedding's output is made to require grad
    while grad is on, as transformers' enable_input_require_grads does (one extra
    input-gradient of the first layer, nothing else). `dynamic` (default
    COMPILE_DYNAMIC) makes sequence lengths symbolic from the first call.
    """
    dynamic = COMPILE_DYNAMIC if dynamic is None else dynamic
    conv = logging.getLogger("torch._dynamo.convert_frame")
    if COMPILE_WATCH not in conv.filters:
        conv.addFilter(COMPILE_WATCH)
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if emb is not None and not getattr(emb, "_ratchet_requires_grad_hook", None):
        emb._ratchet_requires_grad_hook = emb.register_forward_hook(_input_requires_grad)
    layers = decoder_layers(model)
    for layer in layers:
        layer.compile(dynamic=dynamic)
    return len(layers)


def uncompile_layers(model: nn.Module) -> None:
    for layer in decoder_layers(model):
        layer._compiled_call_impl = None
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    hook = getattr(emb, "_ratchet_requires_grad_hook", None) if emb is not None else None
    if hook is not None:
        hook.remove()
        emb._ratchet_requires_grad_hook = None


def set_training_mode(model: nn.Module) -> None:
    """Training forward without dropout: the loss's logprobs must be the policy's, the ones vLLM samples from.

    model.train() would turn on LoRA (and attention) dropout, so the ratio against
    vLLM's logprobs would measure noise. Every module goes to eval mode, and only
    the decoder layers keep the `training` flag (not recursively): activation
    checkpointing runs only in training mode, and the layers themselves hold no dropout.
    """
    model.eval()
    for layer in decoder_layers(model):
        layer.training = True


def build_model(cfg: TrainerConfig, device: torch.device, attn: str | None = None,
                dtype: torch.dtype | None = None) -> nn.Module:
    """The trainable model: base weights, then (if configured) a fresh LoRA adapter.

    Random init and LoRA's A matrices draw from torch's RNG seeded with cfg.seed,
    so a restart rebuilds bit-identical base weights before an adapter is loaded.
    On the meta device only the structure is built (no memory, no weights read).
    """
    model = build_base(cfg, device, attn, dtype)
    apply_activation_checkpointing(model, cfg.ac.freq)
    return make_trainable(model, cfg)


def build_base(cfg: TrainerConfig, device: torch.device, attn: str | None = None,
               dtype: torch.dtype | None = None) -> nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = dtype or resolve_dtype(cfg, device)
    attn = attn or resolve_attn_implementation(cfg, device, False)
    torch.manual_seed(cfg.seed)
    if cfg.model.path is not None:
        path = Path(cfg.model.path)
        if not (path / "config.json").is_file():
            raise ConfigError(f"trainer_config.model.path {str(path)!r} has no config.json. "
                              "Fix: point at a local HF model directory (e.g. .ratchet/models/SmolLM2-135M-Instruct)")
        if device.type == "meta":
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(str(path)), dtype=dtype,
                                                         attn_implementation=attn)
        else:
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, attn_implementation=attn)
            model.to(device)
    else:
        conf = dict(cfg.model.config or {})
        model_type = conf.pop("model_type", None)
        if not model_type:
            raise ConfigError("trainer_config.model.config needs `model_type` (e.g. 'llama', 'qwen3')")
        hf_conf = AutoConfig.for_model(model_type, **conf)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(hf_conf, dtype=dtype, attn_implementation=attn)
    model.config.use_cache = False
    return model


def make_trainable(model: nn.Module, cfg: TrainerConfig) -> nn.Module:
    """Wrap in a fresh LoRA adapter, or unfreeze everything for full fine-tuning."""
    if cfg.adapter is not None:
        from peft import LoraConfig as PeftLoraConfig, get_peft_model

        lc = cfg.adapter
        present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        missing = [t for t in lc.target_modules if t not in present]
        if missing:
            raise ConfigError(f"trainer_config.lora.target_modules {missing} are not modules of this model. "
                              f"Fix: choose from e.g. {sorted(p for p in present if p.endswith('proj'))}")
        model = get_peft_model(model, PeftLoraConfig(
            r=lc.rank, lora_alpha=lc.alpha, lora_dropout=lc.dropout,
            target_modules=list(lc.target_modules), task_type="CAUSAL_LM", bias="none",
        ))
        # Adapter initialised in fp32; with lora_dtype "auto" the Trainer then computes with a bf16
        # copy and keeps these values as fp32 master weights (precision.py).
        for n, p in model.named_parameters():
            if p.requires_grad:
                p.data = p.data.float()
    else:
        for p in model.parameters():
            p.requires_grad_(True)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    n_ckpt = sum(1 for layer in decoder_layers(model) if layer.gradient_checkpointing)
    log.info("model ready", extra={"trainable": trainable, "total": total, "checkpointed_layers": n_ckpt})
    return model


def vocab_size(model: nn.Module) -> int:
    return int(model.get_input_embeddings().weight.shape[0])
