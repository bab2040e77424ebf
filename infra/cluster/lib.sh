# Shared settings for the self-hosted cluster scripts (Temporal server on PostgreSQL).
# Source it; don't run it. Every setting is an environment variable with a default
# that suits one machine; a deployment sets them per host (see infra/cluster/README.md).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# The Temporal server release built from its Go module. v1.32.0 is the newest whose
# go.mod asks for Go 1.26.8 (v1.32.2 needs a newer Go).
TEMPORAL_SERVER_VERSION="${RATCHET_TEMPORAL_SERVER_VERSION:-1.32.0}"
GO_TOOLCHAIN_VERSION="1.26.8"
RATCHET_BIN="$RATCHET_HOME/bin"
TEMPORAL_SERVER_BIN="$RATCHET_BIN/temporal-server-$TEMPORAL_SERVER_VERSION"
TEMPORAL_SQL_TOOL_BIN="$RATCHET_BIN/temporal-sql-tool-$TEMPORAL_SERVER_VERSION"
# Go's module and build caches stay where Go keeps them (~/go/pkg/mod, ~/.cache/go-build),
# machine-wide like pip's and npm's caches: a fresh clone on a machine that built once
# relinks in about a minute instead of compiling for ~10. The binaries themselves are
# cached under .ratchet/bin (stamped), so a rerun in the same clone skips even that.
RATCHET_GO_DIR="$RATCHET_HOME/go"
export GOFLAGS="-modcacherw"

# One cluster's state: PostgreSQL's data dir, the server's config, pid files and logs.
# Two clusters on one machine (the integration test's beside yours) use two dirs and ports.
CLUSTER_DIR="${RATCHET_CLUSTER_DIR:-$RATCHET_HOME/cluster}"
# The address the Temporal server binds and advertises; workers on other hosts dial it.
CLUSTER_HOST="${RATCHET_CLUSTER_HOST:-127.0.0.1}"
# The frontend's gRPC port; history, matching, worker, membership, HTTP and metrics
# ports are fixed offsets from it, so one variable moves a whole server.
FRONTEND_PORT="${RATCHET_CLUSTER_TEMPORAL_PORT:-7233}"
NAMESPACE="${RATCHET_CLUSTER_NAMESPACE:-default}"
RETENTION="${RATCHET_CLUSTER_RETENTION:-720h}"
# PostgreSQL: Debian's server binaries, a cluster of our own in CLUSTER_DIR/pgdata.
PG_VERSION="${RATCHET_PG_VERSION:-15}"
PG_BINDIR="/usr/lib/postgresql/$PG_VERSION/bin"
PG_HOST="${RATCHET_PG_HOST:-127.0.0.1}"
PG_PORT="${RATCHET_PG_PORT:-5433}"
PG_USER="${RATCHET_PG_USER:-temporal}"
PG_DATA="$CLUSTER_DIR/pgdata"
PG_SOCKET_DIR="$CLUSTER_DIR/pgsock"
PG_PASSWORD_FILE="$CLUSTER_DIR/pg-password"

# Same messages and search attributes the dev server gets (infra/temporal.sh).
SEARCH_ATTRIBUTES="RatchetStep:Int RatchetMeanReward:Double RatchetPolicyVersion:Int RatchetStatus:Keyword RatchetRunId:Keyword"
TEMPORAL_CLI="$RATCHET_VENVS/tools/bin/temporal"

# PostgreSQL refuses to run as root: as root, its commands run as Debian's postgres user.
as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pid_running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
