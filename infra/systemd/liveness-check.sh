#!/usr/bin/env bash
# liveness-check.sh NAME: kill -9 ratchet-NAME.service when its liveness file went stale.
# The workers touch their file themselves. The services they need touch none, so they are probed here
# and each answer touches the file for them: one that stops answering (hung) goes stale by the same rule
#   inference  vLLM's /health (http://$RATCHET_VLLM_PROBE_HOST:$RATCHET_VLLM_PORT, [127.0.0.1:8000])
#   inference-gpu-N  replica N of a GPU layout: its /health at the URL in $RATCHET_LAYOUT_ENV [/etc/ratchet/layout.env]
#   temporal   the Temporal server's health check (infra/cluster/temporal-server.sh health)
#   docker     `docker info`, for Debian's docker.service (the rollout hosts' dockerd)
#   RATCHET_LIVENESS_STALE_S  how old the file may get [60]
#   RATCHET_LIVENESS_GRACE_S  after the process starts, how long before its file must exist [180:
#                             the trainer imports torch and builds its model first]
#   RATCHET_LIVENESS_DIR      where the units' liveness files are [/run/ratchet]
# A service that is not running is left alone (Restart=always handles exits).
set -euo pipefail
name=${1:?usage: liveness-check.sh NAME (trainer, trainer-gpu, worker-main, worker-rollout; probed: inference, inference-gpu-N, temporal, docker)}
unit="ratchet-$name.service"
probe=""
case "$name" in
  inference) probe() { curl -fsS -m 10 -o /dev/null "http://${RATCHET_VLLM_PROBE_HOST:-127.0.0.1}:${RATCHET_VLLM_PORT:-8000}/health"; }; probe=1 ;;
  inference-gpu-*)  # replica N of a GPU layout (ratchet-inference-gpu@N.service): its URL from the layout file
    i=${name#inference-gpu-}; unit="ratchet-inference-gpu@$i.service"
    # shellcheck disable=SC1090
    url_var="RATCHET_LAYOUT_INFERENCE_${i}_URL"; source "${RATCHET_LAYOUT_ENV:-/etc/ratchet/layout.env}"
    probe() { curl -fsS -m 10 -o /dev/null "${!url_var%/v1}/health"; }; probe=1 ;;
  temporal) probe() { timeout 15 bash "${RATCHET_ROOT:-/opt/ratchet}/infra/cluster/temporal-server.sh" health; }; probe=1 ;;
  docker) unit=docker.service; probe() { timeout 15 docker info --format '{{.ID}}' >/dev/null; }; probe=1 ;;
esac
stale=${RATCHET_LIVENESS_STALE_S:-60}
grace=${RATCHET_LIVENESS_GRACE_S:-180}
file="${RATCHET_LIVENESS_DIR:-/run/ratchet}/$name/alive"

[ "$(systemctl show -p ActiveState --value "$unit")" = active ] || exit 0
pid=$(systemctl show -p MainPID --value "$unit")
[ "${pid:-0}" != 0 ] || exit 0
if [ -n "$probe" ] && probe >/dev/null 2>&1; then mkdir -p "$(dirname "$file")"; touch "$file"; fi
now=$(date +%s)
started=$(date -d "$(systemctl show -p ExecMainStartTimestamp --value "$unit")" +%s 2>/dev/null || echo "$now")
if [ -f "$file" ]; then touched=$(stat -c %Y "$file"); else touched=0; fi
# A file older than this process is its predecessor's: count from the start, after the grace.
if [ "$touched" -lt "$started" ]; then age=$(( now - started - grace )); else age=$(( now - touched )); fi
if [ "$age" -gt "$stale" ]; then
  echo "ratchet-liveness: $unit (pid $pid): $file not touched for ${age}s (limit ${stale}s): frozen or wedged; kill -9, Restart=always starts it again" >&2
  systemctl kill -s KILL "$unit"
fi
