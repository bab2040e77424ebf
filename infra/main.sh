#!/usr/bin/env bash
# The README's main command: set up a fresh machine, bring the local stack up,
# check it, and run a short real training run end to end (SmolLM2 on CPU, real
# sandboxes, real trainer). Rerunning is safe: set-up skips what is done.
source "$(dirname "$0")/lib.sh"
cd "$RATCHET_ROOT"

# With a config, set-up and the stack are what that config's layout describes (src/layout): on a GPU
# config (trainer.device = "cuda") vLLM's CUDA build, one replica per GPU group and the trainer under
# torchrun (docs/gpu.md); without, the CPU stack.
CONFIG="${1:-configs/swe-grep/smoke.toml}"
bash infra/setup.sh ${1:+"$CONFIG"}
bin/ratchet up ${1:+--config "$CONFIG"}
bin/ratchet doctor
bin/ratchet train "$CONFIG" --wait
