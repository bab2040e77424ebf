#!/usr/bin/env bash
# PostgreSQL for the Temporal server: Debian's postgresql package, and a database
# cluster of Ratchet's own in $RATCHET_CLUSTER_DIR/pgdata (not Debian's main cluster),
# with a `temporal` role and the two databases the server uses.
#   infra/cluster/postgres.sh install  the Debian package only (what set-up runs)
#   infra/cluster/postgres.sh setup    install, create the cluster, role and databases, running (idempotent)
#   infra/cluster/postgres.sh start    start it (runs setup first)
#   infra/cluster/postgres.sh stop
#   infra/cluster/postgres.sh status
#   infra/cluster/postgres.sh psql ... a psql shell as the superuser
source "$(dirname "$0")/lib.sh"

PG_LOG="$CLUSTER_DIR/postgres.log"

pg_running() { as_pg "$PG_BINDIR/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; }

superuser_psql() { as_pg "$PG_BINDIR/psql" -h "$PG_SOCKET_DIR" -p "$PG_PORT" -d postgres -v ON_ERROR_STOP=1 -qAt "$@"; }

install_packages() {
  [ -x "$PG_BINDIR/postgres" ] && return 0
  apt_install "postgresql-$PG_VERSION"
  [ -x "$PG_BINDIR/postgres" ] || die "postgresql-$PG_VERSION is installed but $PG_BINDIR/postgres is missing. Fix: set RATCHET_PG_VERSION to the installed major version (ls /usr/lib/postgresql)"
}

init_cluster() {
  mkdir -p "$CLUSTER_DIR"
  if [ ! -f "$PG_PASSWORD_FILE" ]; then
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$PG_PASSWORD_FILE")
  fi
  [ -f "$PG_DATA/PG_VERSION" ] && return 0
  log "creating a PostgreSQL $PG_VERSION cluster in $PG_DATA (port $PG_PORT)"
  mkdir -p "$PG_DATA" "$PG_SOCKET_DIR"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$PG_DATA" "$PG_SOCKET_DIR"
  chmod 700 "$PG_DATA"
  # The superuser logs in over the unix socket as its own OS user (peer); everyone else
  # needs a password over TCP (scram-sha-256).
  as_pg "$PG_BINDIR/initdb" -D "$PG_DATA" --auth-local=peer --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >/dev/null
  cat >>"$PG_DATA/postgresql.conf" <<CONF
# Ratchet's Temporal cluster (infra/cluster/postgres.sh)
listen_addresses = '$PG_HOST'
port = $PG_PORT
unix_socket_directories = '$PG_SOCKET_DIR'
max_connections = 200
shared_buffers = 128MB
CONF
  # Temporal on other hosts connects over TCP from anywhere the firewall lets through.
  echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PG_DATA/pg_hba.conf"
}

start() {
  install_packages
  init_cluster
  if pg_running; then log "postgresql already running ($PG_DATA)"; else
    touch "$PG_LOG"; [ "$(id -u)" = 0 ] && chown postgres:postgres "$PG_LOG"
    # listen_addresses follows RATCHET_PG_HOST on every start (a host's address may change).
    as_pg "$PG_BINDIR/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 60 \
      -o "-c listen_addresses=$PG_HOST -c port=$PG_PORT" start >/dev/null \
      || die "PostgreSQL did not start. Its log, $PG_LOG, ends with: $(tail -5 "$PG_LOG" 2>/dev/null)"
    log "postgresql started on $PG_HOST:$PG_PORT (data $PG_DATA, log $PG_LOG)"
  fi
  create_role_and_databases
}

create_role_and_databases() {
  local password; password=$(cat "$PG_PASSWORD_FILE")
  if [ -z "$(superuser_psql -c "SELECT 1 FROM pg_roles WHERE rolname = '$PG_USER'")" ]; then
    superuser_psql -c "CREATE ROLE $PG_USER LOGIN PASSWORD '$password'"
  fi
  for db in temporal temporal_visibility; do
    if [ -z "$(superuser_psql -c "SELECT 1 FROM pg_database WHERE datname = '$db'")" ]; then
      superuser_psql -c "CREATE DATABASE $db OWNER $PG_USER"
    fi
  done
}

stop() {
  if pg_running; then
    as_pg "$PG_BINDIR/pg_ctl" -D "$PG_DATA" -m fast -w stop >/dev/null
    log "postgresql stopped"
  fi
}

case "${1:-setup}" in
  install) install_packages ;;
  setup) start ;;
  start) start ;;
  stop) stop ;;
  status) pg_running && echo "running ($PG_HOST:$PG_PORT, $PG_DATA)" || { echo "stopped"; exit 1; } ;;
  psql) shift; as_pg "$PG_BINDIR/psql" -h "$PG_SOCKET_DIR" -p "$PG_PORT" -d postgres "$@" ;;
  *) die "usage: infra/cluster/postgres.sh [install|setup|start|stop|status|psql]" ;;
esac
