#!/usr/bin/env bash
# The README's main command: set up a fresh machine, bring the local stack up,
# check it, and run a short real training run end to end (SmolLM2 on CPU, real
# sandboxes, real trainer). Rerunning is safe: set-up skips what is done.
source "$(dirname "$0")/lib.sh"
cd "$RATCHET_ROOT"

CONFIG="${1:-configs/swe-grep/smoke.toml}"
bash infra/setup.sh
bin/ratchet up
bin/ratchet doctor
bin/ratchet train "$CONFIG" --wait
