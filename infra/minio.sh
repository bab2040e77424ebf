#!/usr/bin/env bash
# MinIO, the S3-compatible server the S3 artifact store is tested against (and a
# self-hosted cluster can use): built from its Go module with the installed Go.
# The binary is cached (stamped) under $RATCHET_HOME/minio/bin, so a rerun skips the
# build; Go's module and build caches stay where Go keeps them (~/go/pkg/mod,
# ~/.cache/go-build), machine-wide like infra/cluster's, so a fresh clone on a
# machine that built once only relinks; the binary itself is kept in the machine cache
# ($RATCHET_MACHINE_CACHE/minio/<version>, infra/lib.sh), which a fresh clone copies.
#   infra/minio.sh setup   build the server (idempotent, stamped; holds /tmp/ratchet-build.lock)
#   infra/minio.sh start   start it in the background and create the bucket
#   infra/minio.sh stop    stop it (the data dir stays)
#   infra/minio.sh status
#   infra/minio.sh env     print the AWS_* / RATCHET_S3_* exports a client needs
# Settings (environment):
#   RATCHET_MINIO_PORT     S3 API port (default 9100)
#   RATCHET_MINIO_ADDRESS  listen address (default 127.0.0.1; a multi-host setup gives its own)
#   RATCHET_MINIO_DATA     data dir (default $RATCHET_HOME/minio/data)
#   RATCHET_MINIO_BUCKET   bucket created at start (default ratchet)
#   MINIO_ROOT_USER / MINIO_ROOT_PASSWORD  server credentials (defaults: ratchet / ratchet-secret;
#                          clients use them as AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)
source "$(dirname "$0")/lib.sh"

# The newest module version (no semver tags upstream); needs Go >= 1.24, builds with 1.26.
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"
MINIO_HOME="$RATCHET_HOME/minio"
MINIO_BIN="$MINIO_HOME/bin/minio"
PORT="${RATCHET_MINIO_PORT:-9100}"
ADDRESS="${RATCHET_MINIO_ADDRESS:-127.0.0.1}"
DATA="${RATCHET_MINIO_DATA:-$MINIO_HOME/data}"
BUCKET="${RATCHET_MINIO_BUCKET:-ratchet}"
export MINIO_ROOT_USER="${MINIO_ROOT_USER:-ratchet}"
export MINIO_ROOT_PASSWORD="${MINIO_ROOT_PASSWORD:-ratchet-secret}"
PIDFILE="$RATCHET_HOME/run/minio-$PORT.pid"
LOGFILE="$RATCHET_LOGS/minio-$PORT.log"

setup() {
  if stamp_ok minio "$MINIO_VERSION" && [ -x "$MINIO_BIN" ]; then
    log "minio $MINIO_VERSION present"
    # A clone that built before the machine cache existed seeds it.
    [ -f "$RATCHET_MACHINE_CACHE/minio/$MINIO_VERSION/.complete" ] || machine_cache_put minio "$MINIO_VERSION" "$MINIO_BIN"
    return 0
  fi
  if machine_cached minio "$MINIO_VERSION" "$MINIO_BIN"; then stamp_write minio "$MINIO_VERSION"; return 0; fi
  command -v go >/dev/null || die "Go is missing, and MinIO is built from its Go module. Fix: install Go >= 1.24 (https://go.dev/dl) and rerun infra/minio.sh setup"
  need_free_disk 3 "$RATCHET_HOME"
  mkdir -p "$MINIO_HOME/bin"
  log "building minio $MINIO_VERSION with $(go version | awk '{print $3}') (a few minutes on 2 cores the first time on this machine; Go's caches make a rebuild a relink)"
  # One heavy build at a time on a shared machine. GOPATH/GOCACHE/GOMODCACHE are Go's
  # defaults (not set here); only the binary goes under .ratchet.
  flock /tmp/ratchet-build.lock env GOBIN="$MINIO_HOME/bin" GOTOOLCHAIN=local GOFLAGS=-modcacherw \
    go install "github.com/minio/minio@$MINIO_VERSION"
  [ -x "$MINIO_BIN" ] || die "go install finished but $MINIO_BIN is missing. Fix: rm -rf $MINIO_HOME/bin and rerun infra/minio.sh setup"
  stamp_write minio "$MINIO_VERSION"
  machine_cache_put minio "$MINIO_VERSION" "$MINIO_BIN"
  log "minio built: $MINIO_BIN"
}

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }
port_in_use() { (exec 3<>"/dev/tcp/$ADDRESS/$1") 2>/dev/null; }
endpoint() { printf 'http://%s:%s' "$ADDRESS" "$PORT"; }

start() {
  setup
  if running; then log "minio already running on $(endpoint) (pid $(cat "$PIDFILE"))"; make_bucket; return 0; fi
  port_in_use "$PORT" && die "port $PORT is already taken, so MinIO cannot start. Fix: stop that process (ss -ltnp 'sport = :$PORT'), or set RATCHET_MINIO_PORT"
  mkdir -p "$DATA" "$(dirname "$PIDFILE")"
  log "starting minio on $(endpoint) (data $DATA, log $LOGFILE)"
  MINIO_BROWSER=off setsid nohup "$MINIO_BIN" server --quiet --address "$ADDRESS:$PORT" "$DATA" >>"$LOGFILE" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 60); do
    if curl -fsS "$(endpoint)/minio/health/live" >/dev/null 2>&1; then make_bucket; return 0; fi
    running || die "minio exited at start. See $LOGFILE"
    sleep 0.5
  done
  die "minio did not become healthy in 30 s. See $LOGFILE"
}

# The bucket is a directory of the data dir to MinIO: creating it needs no client.
make_bucket() {
  mkdir -p "$DATA/$BUCKET"
}

stop() {
  if running; then
    local pid; pid=$(cat "$PIDFILE")
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    log "minio on port $PORT stopped"
  fi
  rm -f "$PIDFILE"
}

status() {
  if running; then echo "minio: running on $(endpoint) (pid $(cat "$PIDFILE")), bucket $BUCKET, data $DATA"; else echo "minio: stopped"; fi
}

env_exports() {
  cat <<EOF
export AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER
export AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD
export AWS_REGION=us-east-1
export RATCHET_S3_ENDPOINT=$(endpoint)
export RATCHET_S3_BUCKET=$BUCKET
EOF
}

case "${1:-}" in
  setup) setup ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) env_exports ;;
  *) die "usage: infra/minio.sh setup|start|stop|status|env" ;;
esac
