#!/usr/bin/env bash
# Builds the offline task set in $RATCHET_HOME/tasks (train.jsonl, heldout.jsonl,
# yield.json, repos/<pkg>-<version>.git) from the pinned PyPI packages in
# taskgen/packages.toml. Idempotent: skipped when packages.toml, the generator's
# source, the seed and the target are unchanged; downloaded sdists are cached in
# $RATCHET_HOME/cache/sdists and checked against their sha256 pins on every run.
#   SEED=0 TARGET=160 WORKERS=2 bash infra/tasks.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SEED="${SEED:-0}"
TARGET="${TARGET:-160}"
WORKERS="${WORKERS:-2}"
TASKGEN="$RATCHET_ROOT/taskgen"
OUT="$RATCHET_HOME/tasks"

apt_install git

venv="$RATCHET_VENVS/taskgen"
env_hash="$(recipe_hash "$TASKGEN/pyproject.toml")"
if ! stamp_ok taskgen-venv "$env_hash"; then
  # Its dependencies from the machine cache where an earlier clone installed them (lib.sh venv_from_cache);
  # the editable ratchet-taskgen names this clone, so it is installed again over the cached one.
  if venv_from_cache taskgen "$(venv_key "$env_hash")"; then
    "$venv/bin/python" -m pip install --quiet --no-deps -e "$TASKGEN"
  else
    venv="$(venv_for taskgen)"
    log "installing ratchet-taskgen (+ pytest 7.2.1, the sandbox's version) into $venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -e "$TASKGEN"
    venv_to_cache taskgen "$(venv_key "$env_hash")"
  fi
  stamp_write taskgen-venv "$env_hash"
fi

recipe="$(RECIPE_EXTRA="seed=$SEED target=$TARGET" recipe_hash "$TASKGEN/packages.toml" "$TASKGEN/pyproject.toml" \
  $(find "$TASKGEN/ratchet_taskgen" -name '*.py' | LC_ALL=C sort))"
if stamp_ok tasks "$recipe" && [ -s "$OUT/train.jsonl" ]; then
  log "task set up to date ($OUT, recipe $recipe)"
  exit 0
fi
# The same recipe on the same Python gives the same task set (tests/test_generate.py, same seed same
# set), so a fresh clone on a machine that generated it before copies it from the machine cache
# (infra/lib.sh) instead of verifying ~200 candidate bugs again: ~150 s of both cores in set-up.
# CI is in the key because pytest, which writes the failure text the problem statements quote,
# prints full diffs under CI=true; a changed generator, pin, seed or target is a new recipe.
cache_key="$recipe-py$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-ci${CI:-}"
cached="$RATCHET_MACHINE_CACHE/tasks/$cache_key"
if [ -f "$cached/.complete" ]; then
  rm -rf "$OUT" && mkdir -p "$OUT" && tar -xf "$cached/tasks.tar" -C "$OUT"
  stamp_write tasks "$recipe"
  log "task set from the machine cache ($cached): $(wc -l <"$OUT/train.jsonl") train, $(wc -l <"$OUT/heldout.jsonl") heldout"
  exit 0
fi

need_free_disk 1 "$RATCHET_HOME"
log "generating the task set into $OUT (seed $SEED, target $TARGET, $WORKERS workers)"
timed taskgen "$venv/bin/python" -m ratchet_taskgen generate --out "$OUT" --cache "$RATCHET_HOME/cache/sdists" \
  --seed "$SEED" --target "$TARGET" --workers "$WORKERS"
stamp_write tasks "$recipe"
# Best effort, as machine_cache_put: a cache that cannot be written only costs the next clone a generation.
tmp=$(mktemp -d "$RATCHET_MACHINE_CACHE/tasks/.tmp.XXXXXX" 2>/dev/null || { mkdir -p "$RATCHET_MACHINE_CACHE/tasks" && mktemp -d "$RATCHET_MACHINE_CACHE/tasks/.tmp.XXXXXX"; }) \
  && tar -cf "$tmp/tasks.tar" -C "$OUT" . && touch "$tmp/.complete" && { rm -rf "$cached"; mv "$tmp" "$cached"; } || rm -rf "${tmp:-}"
log "task set ready: $(wc -l <"$OUT/train.jsonl") train, $(wc -l <"$OUT/heldout.jsonl") heldout; report $OUT/yield.json"
