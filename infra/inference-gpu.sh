#!/usr/bin/env bash
# Inference on a GPU host: vLLM's CUDA build from PyPI in a venv of its own (.ratchet/venvs/vllm-cuda; the CPU
# build in .ratchet/venvs/vllm stays for CPU hosts), the config's model in place, and the probe LoRA adapter
# `ratchet doctor` loads. It installs only: `ratchet up --config <config>` starts the replicas the config's
# layout names (src/layout), each on its GPUs with the flags the config implies.
#
# Usage: infra/inference-gpu.sh <config> [install|install-env|install-model]   (default: install = both)
#   install-env    the vLLM CUDA venv (set-up runs it beside the other installs)
#   install-model  the model at model.path: there already, or fetched once from the hub (model.hub) when the hub
#                  answers from this host; else it stops and says how to place the files. Then the probe adapter.
# Nothing here runs at run time: vLLM and the trainer start with HF_HUB_OFFLINE=1.
#
# Environment: RATCHET_HOME (state dir), HF_ENDPOINT (the hub, default https://huggingface.co), HF_TOKEN (gated models).
source "$(dirname "$0")/lib.sh"

VLLM_VERSION=0.32.0   # the same release as the CPU build (infra/inference.sh); PyPI's vllm wheel is the CUDA build

CONFIG="${1:-}"
[ -n "$CONFIG" ] || die "usage: infra/inference-gpu.sh <config> [install|install-env|install-model]. Fix: name the run config, e.g. configs/gpu/qwen3-8b-lora-1gpu.toml"
layout_env=$("$RATCHET_ROOT/bin/ratchet" layout "$CONFIG" --format env) || die "ratchet layout $CONFIG failed (its message is above). Fix: the config keys it names"
eval "$layout_env"
[ "$RATCHET_LAYOUT_KIND" = gpu ] || die "$CONFIG runs its trainer on the CPU (trainer.device is not \"cuda\"): the CPU stack's infra/inference.sh serves it. Fix: set trainer.device = \"cuda\" for a GPU host"
HUB="${HF_ENDPOINT:-https://huggingface.co}"

install_vllm_cuda() {
  local hash; hash=$(RECIPE_EXTRA="$(declare -f install_vllm_cuda) $VLLM_VERSION" recipe_hash /dev/null)
  if stamp_ok vllm-cuda-env "$hash"; then log "vLLM CUDA env up to date"; return 0; fi
  need_free_disk 20 "$RATCHET_HOME"
  local venv; venv=$(venv_for "$RATCHET_LAYOUT_VLLM_VENV")
  log "installing vllm $VLLM_VERSION (CUDA build, with its CUDA torch) into $venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q "vllm==$VLLM_VERSION"
  "$venv/bin/python" -c 'import torch, vllm.entrypoints.openai.api_server; assert torch.version.cuda, "torch without CUDA"' \
    || die "vLLM's CUDA build does not import in $venv. Fix: rm -rf $venv and run infra/inference-gpu.sh $CONFIG install-env again"
  stamp_write vllm-cuda-env "$hash"
  log "vLLM CUDA env ready"
}

hub_answers() {
  local auth=()
  [ -z "${HF_TOKEN:-}" ] || auth=(-H "Authorization: Bearer $HF_TOKEN")
  curl -fsS -m 10 -o /dev/null "${auth[@]}" "$HUB/api/models/$1" 2>/dev/null
}

install_model() {
  local dir="$RATCHET_LAYOUT_MODEL_PATH" hub="$RATCHET_LAYOUT_MODEL_HUB"
  if [ -f "$dir/config.json" ]; then
    log "model in place: $dir"
  elif [ -z "$hub" ]; then
    die "no model at $dir (model.path) and no model.hub to fetch it from. Fix: put the Hugging Face model directory there (config.json, *.safetensors, tokenizer.json, tokenizer_config.json with its chat template), or set model.hub = \"<org>/<name>\" and run set-up again"
  elif ! hub_answers "$hub"; then
    die "the model is not at $dir and the hub ($HUB) does not answer from this host, so set-up cannot fetch $hub. Fix: on a machine that reaches the hub run \`huggingface-cli download $hub --local-dir $(basename "$dir")\` (or git clone $HUB/$hub), copy that directory to $dir on this host, and run set-up again; nothing downloads at run time"
  else
    need_free_disk 40 "$RATCHET_HOME"
    log "fetching $hub from $HUB into $dir (once; nothing downloads at run time)"
    "$RATCHET_VENVS/trainer/bin/python" - "$hub" "$dir" <<'PY'
import sys
from huggingface_hub import snapshot_download
snapshot_download(repo_id=sys.argv[1], local_dir=sys.argv[2], allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"])
PY
    [ -f "$dir/config.json" ] || die "fetching $hub left no config.json in $dir. Fix: check the repo id in model.hub (and HF_TOKEN for a gated model)"
  fi
  if [ "${RATCHET_LAYOUT_LORA:-0}" = 1 ]; then
    local probe; probe="$RATCHET_MODELS/probe-lora-$(basename "$dir")"
    local hash; hash=$(RECIPE_EXTRA="$(sha256sum "$dir/config.json")" recipe_hash "$RATCHET_ROOT/infra/vllm/make_probe_lora.py")
    if stamp_ok "probe-lora-$(basename "$dir")" "$hash" && [ -f "$probe/adapter_config.json" ]; then log "probe LoRA adapter up to date: $probe"; return 0; fi
    "$RATCHET_VENVS/trainer/bin/python" "$RATCHET_ROOT/infra/vllm/make_probe_lora.py" --base "$dir" --out "$probe" >/dev/null
    stamp_write "probe-lora-$(basename "$dir")" "$hash"
    log "probe LoRA adapter: $probe"
  fi
}

case "${2:-install}" in
  install-env) timed vllm-cuda-env install_vllm_cuda ;;
  install-model) timed gpu-model install_model ;;
  install) timed vllm-cuda-env install_vllm_cuda; timed gpu-model install_model ;;
  *) die "unknown command '$2'. Usage: infra/inference-gpu.sh <config> [install|install-env|install-model]" ;;
esac
