#!/usr/bin/env bash
# Metrics sinks virtualenv: the wandb package, for the W&B sink
# (src/metrics/sinks/wandb_sink.py). Its own small venv: it pins its own protobuf.
source "$(dirname "$0")/lib.sh"

hash=$(recipe_hash "$RATCHET_ROOT/infra/metrics/requirements.txt")
if stamp_ok metrics-env "$hash"; then log "metrics env up to date"; exit 0; fi
venv="$RATCHET_VENVS/metrics"
if ! venv_from_cache metrics "$(venv_key "$hash")"; then
  venv=$(venv_for metrics)
  log "installing the metrics sinks environment (wandb) into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r "$RATCHET_ROOT/infra/metrics/requirements.txt"
  venv_to_cache metrics "$(venv_key "$hash")"
fi
"$venv/bin/python" -c 'import wandb' \
  || die "the metrics environment does not import wandb. Fix: rm -rf $venv and run infra/metrics-env.sh again"
stamp_write metrics-env "$hash"
log "metrics env ready"
