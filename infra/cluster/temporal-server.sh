#!/usr/bin/env bash
# A Temporal server on PostgreSQL, built from Temporal's Go module (infra/cluster/build.sh):
# the schema applied with the server's own SQL tool, a config file written from the
# RATCHET_CLUSTER_* / RATCHET_PG_* settings, the namespace and Ratchet's search
# attributes registered.
#   infra/cluster/temporal-server.sh setup    build, PostgreSQL up, schema applied (idempotent)
#   infra/cluster/temporal-server.sh start    setup, then the server in the background
#   infra/cluster/temporal-server.sh run      the server in the foreground, for a process manager (infra/systemd)
#   infra/cluster/temporal-server.sh register wait for a running server, then the namespace and search attributes
#   infra/cluster/temporal-server.sh stop     the server (PostgreSQL keeps running)
#   infra/cluster/temporal-server.sh down     the server and PostgreSQL
#   infra/cluster/temporal-server.sh status
source "$(dirname "$0")/lib.sh"

CONFIG="$CLUSTER_DIR/temporal-server.yaml"
DYNAMIC_CONFIG="$CLUSTER_DIR/dynamicconfig.yaml"
PIDFILE="$CLUSTER_DIR/temporal-server.pid"
LOGFILE="$CLUSTER_DIR/temporal-server.log"
ADDRESS="$CLUSTER_HOST:$FRONTEND_PORT"

sql_tool() {
  SQL_PASSWORD="$(cat "$PG_PASSWORD_FILE")" "$TEMPORAL_SQL_TOOL_BIN" \
    --plugin postgres12 --ep "$PG_HOST" -p "$PG_PORT" -u "$PG_USER" "$@"
}

# The schemas are embedded in the SQL tool (--schema-name): the same files as the
# module's schema/postgresql/v12 directory, versioned, so update-schema migrates an
# older database to this server's version and is a no-op on a current one.
apply_schema() {
  local db schema
  for pair in temporal:postgresql/v12/temporal temporal_visibility:postgresql/v12/visibility; do
    db="${pair%%:*}" schema="${pair#*:}"
    if ! sql_tool --db "$db" update-schema --schema-name "$schema" >>"$CLUSTER_DIR/schema.log" 2>&1; then
      # A fresh database has no schema_version table yet: version 0.0 first, then update.
      sql_tool --db "$db" setup-schema -v 0.0 >>"$CLUSTER_DIR/schema.log" 2>&1 \
        || die "could not set up the $db schema on $PG_HOST:$PG_PORT; see $CLUSTER_DIR/schema.log. Fix: check that PostgreSQL runs (infra/cluster/postgres.sh status)"
      sql_tool --db "$db" update-schema --schema-name "$schema" >>"$CLUSTER_DIR/schema.log" 2>&1 \
        || die "could not update the $db schema to $schema; see $CLUSTER_DIR/schema.log"
    fi
  done
  log "schema current in temporal and temporal_visibility ($PG_HOST:$PG_PORT)"
}

write_config() {
  local password; password=$(cat "$PG_PASSWORD_FILE")
  local p="$FRONTEND_PORT"
  # Port layout: frontend P, history P+1, matching P+2, worker P+6 (Temporal's own
  # defaults around 7233), membership P-300.., frontend HTTP P+10, metrics P+2000.
  (umask 077; cat >"$CONFIG" <<YAML
# Written by infra/cluster/temporal-server.sh; edit the RATCHET_* settings, not this file.
log:
  stdout: true
  level: warn
persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  # Fixed for the life of the cluster: changing it needs a new database.
  numHistoryShards: ${RATCHET_CLUSTER_HISTORY_SHARDS:-4}
  datastores:
$(for store in default:temporal:20 visibility:temporal_visibility:10; do
  IFS=: read -r name db conns <<<"$store"
  cat <<STORE
    postgres-$name:
      sql:
        pluginName: postgres12
        databaseName: $db
        connectAddr: "$PG_HOST:$PG_PORT"
        connectProtocol: tcp
        user: $PG_USER
        password: "$password"
        maxConns: $conns
        maxIdleConns: $conns
        maxConnLifetime: 1h
STORE
done)
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: "$CLUSTER_HOST"
  metrics:
    prometheus:
      framework: tally
      timerType: histogram
      listenAddress: "$CLUSTER_HOST:$((p + 2000))"
services:
  frontend:
    rpc: { grpcPort: $p, membershipPort: $((p - 300)), bindOnIP: "$CLUSTER_HOST", httpPort: $((p + 10)) }
  history:
    rpc: { grpcPort: $((p + 1)), membershipPort: $((p - 299)), bindOnIP: "$CLUSTER_HOST" }
  matching:
    rpc: { grpcPort: $((p + 2)), membershipPort: $((p - 298)), bindOnIP: "$CLUSTER_HOST" }
  worker:
    rpc: { grpcPort: $((p + 6)), membershipPort: $((p - 294)), bindOnIP: "$CLUSTER_HOST" }
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: "$ADDRESS"
dcRedirectionPolicy:
  policy: noop
dynamicConfigClient:
  filepath: "$DYNAMIC_CONFIG"
  pollInterval: 10s
YAML
  )
  local created=0
  [ -f "$DYNAMIC_CONFIG" ] || created=1
  [ -f "$DYNAMIC_CONFIG" ] || cat >"$DYNAMIC_CONFIG" <<'YAML'
# Dynamic config for Ratchet's Temporal cluster; the server rereads it every 10 s.
# Search attributes take effect at once instead of after the cache refresh.
system.forceSearchAttributesCacheRefreshOnRead:
  - value: true
    constraints: {}
YAML
  fairness_config "$created"
}

# Runs share workers fairly (docs/architecture.md "Runs share workers fairly"): fairness keys are
# honoured only with matching.enableFairness, and priority and fairness only within one partition
# of a task queue, so the shared rollout queue has one partition (a rollout takes seconds to
# minutes: one partition's dispatch rate is far above what the queue needs). Appended to a file
# that lacks it, so an existing cluster gets it too; there only the write count is lowered, since a
# backlog may wait in the other partitions: lower the read count too once `temporal task-queue
# describe --task-queue ratchet-rollout` shows them empty.
fairness_config() {
  local created="$1"
  grep -q '^matching.enableFairness:' "$DYNAMIC_CONFIG" && return 0
  cat >>"$DYNAMIC_CONFIG" <<'YAML'
# Runs share workers fairly: fairness keys (the run id) within each priority level (eval below training).
matching.enableFairness:
  - value: true
    constraints: {}
YAML
  if grep -q '^matching.numTaskqueue' "$DYNAMIC_CONFIG"; then
    log "$DYNAMIC_CONFIG already sets task queue partitions; keeping them (priority and fairness hold per partition: docs/architecture.md)"
    return 0
  fi
  cat >>"$DYNAMIC_CONFIG" <<'YAML'
# One partition for the shared rollout queue: priority and fairness hold within a partition.
matching.numTaskqueueWritePartitions:
  - value: 1
    constraints: { taskQueueName: ratchet-rollout }
YAML
  if [ "$created" = 1 ]; then
    cat >>"$DYNAMIC_CONFIG" <<'YAML'
matching.numTaskqueueReadPartitions:
  - value: 1
    constraints: { taskQueueName: ratchet-rollout }
YAML
  else
    log "$DYNAMIC_CONFIG: ratchet-rollout now writes to one partition; set matching.numTaskqueueReadPartitions to 1 for it once its other partitions are empty (docs/architecture.md)"
  fi
}

setup() {
  bash "$RATCHET_ROOT/infra/cluster/build.sh"
  bash "$RATCHET_ROOT/infra/temporal.sh" setup   # the temporal CLI: namespace and search attributes
  bash "$RATCHET_ROOT/infra/cluster/postgres.sh" start
  apply_schema
  write_config
}

healthy() { "$TEMPORAL_CLI" operator cluster health --address "$ADDRESS" >/dev/null 2>&1; }

start() {
  setup
  if pid_running "$PIDFILE"; then log "temporal server already running (pid $(cat "$PIDFILE"), $ADDRESS)"; else
    (exec 3<>"/dev/tcp/$CLUSTER_HOST/$FRONTEND_PORT") 2>/dev/null \
      && die "port $FRONTEND_PORT on $CLUSTER_HOST is taken by another process, so the Temporal server cannot start. Fix: stop it (ss -ltnp 'sport = :$FRONTEND_PORT') or set RATCHET_CLUSTER_TEMPORAL_PORT"
    log "starting temporal server $TEMPORAL_SERVER_VERSION on $ADDRESS (PostgreSQL $PG_HOST:$PG_PORT, log $LOGFILE)"
    setsid nohup "$TEMPORAL_SERVER_BIN" --config-file "$CONFIG" --allow-no-auth start \
      >>"$LOGFILE" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
  fi
  for _ in $(seq 1 90); do
    if healthy; then register_namespace; return 0; fi
    pid_running "$PIDFILE" || die "the Temporal server exited at start. Its log, $LOGFILE, ends with: $(tail -5 "$LOGFILE")"
    sleep 1
  done
  die "the Temporal server did not become healthy in 90 s. See $LOGFILE"
}

# retry SECONDS CMD... : a new namespace reaches the frontend's cache some seconds after it is created.
retry() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>"$CLUSTER_DIR/last-error"; do
    [ "$(date +%s)" -lt "$deadline" ] || { cat "$CLUSTER_DIR/last-error" >&2; return 1; }
    sleep 1
  done
}

register_namespace() {
  local t=("$TEMPORAL_CLI" --address "$ADDRESS")
  if ! "${t[@]}" operator namespace describe --namespace "$NAMESPACE" >/dev/null 2>&1; then
    "${t[@]}" operator namespace create --namespace "$NAMESPACE" --retention "$RETENTION" >/dev/null
    log "namespace $NAMESPACE created (retention $RETENTION)"
  fi
  retry 60 "${t[@]}" operator search-attribute list --namespace "$NAMESPACE" \
    || die "namespace $NAMESPACE is not usable 60 s after it was created. See $LOGFILE"
  local existing; existing=$("${t[@]}" operator search-attribute list --namespace "$NAMESPACE")
  for pair in $SEARCH_ATTRIBUTES; do
    local name="${pair%%:*}" type="${pair##*:}"
    grep -q "$name" <<<"$existing" && continue
    retry 30 "${t[@]}" operator search-attribute create --namespace "$NAMESPACE" --name "$name" --type "$type" \
      || die "could not register search attribute $name on namespace $NAMESPACE. See $LOGFILE"
  done
  log "temporal server ready at $ADDRESS (namespace $NAMESPACE, search attributes registered)"
}

stop() {
  if pid_running "$PIDFILE"; then
    local pid; pid=$(cat "$PIDFILE")
    kill "$pid"
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    log "temporal server stopped"
  fi
  rm -f "$PIDFILE"
}

case "${1:-setup}" in
  setup) setup ;;
  start) start ;;
  run) [ -f "$CONFIG" ] || die "no server config at $CONFIG. Fix: infra/cluster/temporal-server.sh setup"
       exec "$TEMPORAL_SERVER_BIN" --config-file "$CONFIG" --allow-no-auth start ;;
  register) for _ in $(seq 1 90); do healthy && { register_namespace; exit 0; }; sleep 1; done
            die "the Temporal server at $ADDRESS did not become healthy in 90 s" ;;
  stop) stop ;;
  down) stop; bash "$RATCHET_ROOT/infra/cluster/postgres.sh" stop ;;
  health) timeout 10 "$TEMPORAL_CLI" operator cluster health --address "$ADDRESS" >/dev/null ;;
  status) pid_running "$PIDFILE" && healthy && echo "running pid $(cat "$PIDFILE") at $ADDRESS" || { echo "stopped"; exit 1; } ;;
  address) echo "$ADDRESS" ;;
  *) die "usage: infra/cluster/temporal-server.sh [setup|start|stop|down|status|address]" ;;
esac
