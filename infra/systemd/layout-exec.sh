#!/usr/bin/env bash
# layout-exec.sh NAME: runs one process of a GPU host's layout (src/layout) as `ratchet up --config` would:
# vllm-<i> (a vLLM replica on its GPU group) or worker-trainer (the trainer under torchrun on its GPUs),
# with the command line, GPUs (CUDA_VISIBLE_DEVICES) and environment the run config implies. The layout is
# written once per host, on the host (its paths are this host's):
#   RATCHET_HOME=/opt/ratchet/.ratchet /opt/ratchet/bin/ratchet layout <config> --format env > /etc/ratchet/layout.env
# (a Python-only trainer host: write it on a host with Node and the same /opt/ratchet, and copy it).
#   RATCHET_LAYOUT_ENV     the layout file [/etc/ratchet/layout.env]
#   RATCHET_LIVENESS_FILE  when set (the unit's), replaces the layout's liveness file
set -euo pipefail
name=${1:?usage: layout-exec.sh NAME (vllm-0, vllm-1, ..., worker-trainer)}
file=${RATCHET_LAYOUT_ENV:-/etc/ratchet/layout.env}
liveness=${RATCHET_LIVENESS_FILE:-}
fail() { echo "layout-exec: $*" >&2; exit 78; }   # 78: EX_CONFIG, a configuration to fix, not a crash
[ -f "$file" ] || fail "no layout at $file. Fix: RATCHET_HOME=/opt/ratchet/.ratchet /opt/ratchet/bin/ratchet layout <config> --format env > $file"
# shellcheck disable=SC1090
source "$file"
[ "${RATCHET_LAYOUT_KIND:-}" = gpu ] || fail "$file is a ${RATCHET_LAYOUT_KIND:-?} layout: these units serve GPU configs (trainer.device = \"cuda\"). Fix: the CPU units (ratchet-inference, ratchet-trainer)"
line="" cwd="$(cd "$(dirname "$0")/../.." && pwd)"
if [ "$name" = worker-trainer ]; then
  line=$RATCHET_LAYOUT_TRAINER_COMMAND cwd=$RATCHET_LAYOUT_TRAINER_CWD
else
  for ((i = 0; i < ${RATCHET_LAYOUT_INFERENCE_COUNT:-0}; i++)); do
    n="RATCHET_LAYOUT_INFERENCE_${i}_NAME" c="RATCHET_LAYOUT_INFERENCE_${i}_COMMAND"
    [ "${!n}" = "$name" ] && line=${!c}
  done
fi
[ -n "$line" ] || fail "the layout in $file has no process $name (it has worker-trainer and vllm-0 .. vllm-$(( ${RATCHET_LAYOUT_INFERENCE_COUNT:-1} - 1 )))"
eval "set -- $line"
envs=()
while [ $# -gt 0 ] && [[ $1 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do envs+=("$1"); shift; done
[ -z "$liveness" ] || envs+=("RATCHET_LIVENESS_FILE=$liveness")
cd "$cwd"
exec env "${envs[@]}" "$@"
