#!/usr/bin/env bash
# Metrics sinks virtualenv: the wandb package, for the W&B sink
# (src/metrics/sinks/wandb_sink.py). Its own small venv: it pins its own protobuf.
source "$(dirname "$0")/lib.sh"

hash=$(recipe_hash "$RATCHET_ROOT/infra/metrics/requirements.txt")
if stamp_ok metrics-env "$hash"; then log "metrics env up to date"; exit 0; fi
venv="$RATCHET_VENVS/metrics"
venv_install metrics "$(venv_key "$hash")" "the metrics sinks environment (wandb)" -r "$RATCHET_ROOT/infra/metrics/requirements.txt"
"$venv/bin/python" -c 'import wandb' \
  || die "the metrics environment does not import wandb. Fix: rm -rf $venv and run infra/metrics-env.sh again"
stamp_write metrics-env "$hash"
log "metrics env ready"
