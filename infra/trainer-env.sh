#!/usr/bin/env bash
# Trainer virtualenv: torch, transformers, peft, safetensors, temporalio, boto3 (the S3 store), plus the
# ratchet_trainer package in editable mode. Its own venv because vLLM pins its own torch.
source "$(dirname "$0")/lib.sh"

hash=$(recipe_hash "$RATCHET_ROOT/trainer/requirements.txt" "$RATCHET_ROOT/trainer/pyproject.toml")
if stamp_ok trainer-env "$hash"; then log "trainer env up to date"; exit 0; fi
# Only an install needs the space: an up-to-date env must not fail on a disk it already filled.
need_free_disk 8 "$RATCHET_HOME"
# The third-party packages come from the machine cache where an earlier clone installed the same
# requirements (lib.sh venv_from_cache); the editable ratchet_trainer names this clone, so it is added here.
key=$(venv_key "$(recipe_hash "$RATCHET_ROOT/trainer/requirements.txt")")
venv="$RATCHET_VENVS/trainer"
venv_install trainer "$key" "the trainer environment" -r "$RATCHET_ROOT/trainer/requirements.txt"
"$venv/bin/python" -m pip install -q --no-deps -e "$RATCHET_ROOT/trainer"
"$venv/bin/python" -c 'import torch, transformers, peft, safetensors, temporalio, boto3' \
  || die "the trainer environment does not import. Fix: rm -rf $venv and run infra/trainer-env.sh again"
stamp_write trainer-env "$hash"
log "trainer env ready"
