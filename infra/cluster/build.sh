#!/usr/bin/env bash
# Builds the Temporal server and its SQL schema tool from Temporal's Go module
# (go.temporal.io/server, via the Go module proxy) into .ratchet/bin, stamped so a
# rerun with the same version and flags does nothing. ~10 min and ~3.5 GB of Go's own
# caches on 2 cores the first time; a fresh clone on the same machine copies the binaries
# from the machine cache ($RATCHET_MACHINE_CACHE/temporal-server/<recipe hash>, infra/lib.sh).
#   infra/cluster/build.sh
source "$(dirname "$0")/lib.sh"

# -trimpath drops local paths from the binary; -s -w drop the symbol table and DWARF
# (the server is ~211 MB with them). Stack traces keep function names either way.
BUILD_FLAGS=(-trimpath "-ldflags=-s -w")
STAMP_HASH=$(RECIPE_EXTRA="$TEMPORAL_SERVER_VERSION:${BUILD_FLAGS[*]}:$GO_TOOLCHAIN_VERSION" recipe_hash /dev/null)

# go_binary : prints a `go` that can build a module asking for Go $GO_TOOLCHAIN_VERSION.
# Any Go >= 1.21 fetches the right toolchain itself from the Go module proxy
# (GOTOOLCHAIN=auto); with no Go at all, the toolchain module is fetched from the
# same proxy (golang.org/toolchain is an ordinary Go module) into .ratchet/go.
go_binary() {
  local go
  for go in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
    [ -n "$go" ] && [ -x "$go" ] || continue
    local minor; minor=$("$go" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
    [ -n "$minor" ] && [ "$minor" -ge 21 ] && { printf '%s' "$go"; return 0; }
  done
  local dir="$RATCHET_GO_DIR/toolchain/go$GO_TOOLCHAIN_VERSION"
  if [ ! -x "$dir/bin/go" ]; then
    local mod="v0.0.1-go$GO_TOOLCHAIN_VERSION.linux-amd64"
    local url="${GOPROXY_URL:-https://proxy.golang.org}/golang.org/toolchain/@v/$mod.zip"
    log "no Go >= 1.21 found; fetching the Go $GO_TOOLCHAIN_VERSION toolchain module from $url"
    apt_install curl unzip
    mkdir -p "$RATCHET_GO_DIR/toolchain"
    local zip="$RATCHET_GO_DIR/toolchain/$mod.zip"
    curl -fsSL --retry 3 -o "$zip" "$url" || die "could not download the Go toolchain from $url. Fix: install Go >= 1.21 (https://go.dev/dl) or make the Go module proxy reachable (GOPROXY_URL)"
    rm -rf "$dir.tmp"; mkdir -p "$dir.tmp"
    unzip -q "$zip" -d "$dir.tmp"
    mv "$dir.tmp/golang.org/toolchain@$mod" "$dir"
    rm -rf "$dir.tmp" "$zip"
    # Zip archives drop the executable bit.
    chmod +x "$dir"/bin/* "$dir"/pkg/tool/*/*
  fi
  printf '%s' "$dir/bin/go"
}

build() {
  if stamp_ok temporal-server-build "$STAMP_HASH" && [ -x "$TEMPORAL_SERVER_BIN" ] && [ -x "$TEMPORAL_SQL_TOOL_BIN" ]; then
    log "temporal server $TEMPORAL_SERVER_VERSION present ($TEMPORAL_SERVER_BIN)"
    # A clone that built before the machine cache existed seeds it.
    [ -f "$RATCHET_MACHINE_CACHE/temporal-server/$STAMP_HASH/.complete" ] \
      || machine_cache_put temporal-server "$STAMP_HASH" "$TEMPORAL_SERVER_BIN" "$TEMPORAL_SQL_TOOL_BIN"
    return 0
  fi
  if machine_cached temporal-server "$STAMP_HASH" "$TEMPORAL_SERVER_BIN" "$TEMPORAL_SQL_TOOL_BIN"; then
    stamp_write temporal-server-build "$STAMP_HASH"
    return 0
  fi
  need_free_disk 4 "$RATCHET_HOME"
  local go; go=$(go_binary)
  mkdir -p "$RATCHET_BIN" "$RATCHET_GO_DIR/bin"
  local gobin; gobin=$(mktemp -d "$RATCHET_GO_DIR/bin/build.XXXXXX")
  log "building Temporal server $TEMPORAL_SERVER_VERSION and its SQL tool from go.temporal.io/server with $("$go" version) (~10 min on 2 cores the first time; log $RATCHET_LOGS/temporal-server-build.log)"
  # Heavy: other builds on a shared machine wait for this lock rather than compete for cores.
  if ! GOBIN="$gobin" GOTOOLCHAIN=auto flock /tmp/ratchet-build.lock \
      "$go" install "${BUILD_FLAGS[@]}" \
        "go.temporal.io/server/cmd/server@v$TEMPORAL_SERVER_VERSION" \
        "go.temporal.io/server/cmd/tools/sql@v$TEMPORAL_SERVER_VERSION" \
        >"$RATCHET_LOGS/temporal-server-build.log" 2>&1; then
    tail -20 "$RATCHET_LOGS/temporal-server-build.log" >&2
    die "building the Temporal server failed; see $RATCHET_LOGS/temporal-server-build.log. Fix: check that the Go module proxy is reachable (go env GOPROXY) and $RATCHET_HOME has 4 GB free"
  fi
  mv "$gobin/server" "$TEMPORAL_SERVER_BIN"
  mv "$gobin/sql" "$TEMPORAL_SQL_TOOL_BIN"
  rmdir "$gobin"
  log "built $TEMPORAL_SERVER_BIN ($(du -h "$TEMPORAL_SERVER_BIN" | cut -f1)) and $TEMPORAL_SQL_TOOL_BIN"
  machine_cache_put temporal-server "$STAMP_HASH" "$TEMPORAL_SERVER_BIN" "$TEMPORAL_SQL_TOOL_BIN"
  stamp_write temporal-server-build "$STAMP_HASH"
}

build
