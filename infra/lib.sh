# Shared helpers for Ratchet's idempotent set-up scripts. Source it; don't run it.
# Every step keeps its state under $RATCHET_HOME (default: <repo>/.ratchet) and
# skips work whose recipe hash matches the stamp it wrote last time.
set -euo pipefail

RATCHET_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export RATCHET_ROOT
export RATCHET_HOME="${RATCHET_HOME:-$RATCHET_ROOT/.ratchet}"
export RATCHET_VENVS="$RATCHET_HOME/venvs"
export RATCHET_LOGS="$RATCHET_HOME/logs"
export RATCHET_STAMPS="$RATCHET_HOME/stamps"
export RATCHET_MODELS="$RATCHET_HOME/models"
mkdir -p "$RATCHET_HOME" "$RATCHET_VENVS" "$RATCHET_LOGS" "$RATCHET_STAMPS" "$RATCHET_MODELS"

PYTHON="${PYTHON:-python3}"

log() { printf '[ratchet %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[ratchet] ERROR: %s\n' "$*" >&2; exit 1; }

# recipe_hash FILE... : a short content hash of the files (and extra strings via RECIPE_EXTRA).
recipe_hash() {
  { cat "$@"; printf '%s' "${RECIPE_EXTRA:-}"; } | sha256sum | cut -c1-16
}

# stamp_ok NAME HASH : true when step NAME last completed with recipe HASH.
stamp_ok() { [ -f "$RATCHET_STAMPS/$1" ] && [ "$(cat "$RATCHET_STAMPS/$1")" = "$2" ]; }
stamp_write() { printf '%s' "$2" >"$RATCHET_STAMPS/$1"; }
stamp_read() { cat "$RATCHET_STAMPS/$1" 2>/dev/null || true; }

# timed NAME CMD... : runs CMD and records its wall time in $RATCHET_HOME/setup-times.tsv,
# which BENCHMARKS.md's cold set-up figures come from.
timed() {
  local name="$1"; shift
  local t0; t0=$(date +%s.%N)
  "$@"
  local t1; t1=$(date +%s.%N)
  printf '%s\t%s\t%.1f\n' "$(date -Is)" "$name" "$(echo "$t1 - $t0" | bc)" >>"$RATCHET_HOME/setup-times.tsv"
}

# in_parallel "NAME=COMMAND" ... : runs each COMMAND (a bash line, lib.sh's helpers loaded) at once
# in the background, its output streamed with a "NAME |" prefix; waits for all and fails naming
# every one that failed. For set-up steps that share nothing but the machine (pip downloads of one
# overlap another's unpacking); apt installs stay outside, as dpkg takes one lock.
in_parallel() {
  local pids=() names=() spec
  for spec in "$@"; do
    local name=${spec%%=*} cmd=${spec#*=}
    ( set -o pipefail; bash -c "source '$RATCHET_ROOT/infra/lib.sh'; $cmd" 2>&1 | sed -u "s/^/$name | /" >&2 ) &
    pids+=($!); names+=("$name")
  done
  local i failed=()
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed+=("${names[$i]}"); done
  [ ${#failed[@]} -eq 0 ] || die "set-up failed in: ${failed[*]} (its lines above are prefixed with its name). Fix what they name and run set-up again: steps already done are skipped"
}

# need_free_disk GB PATH : fail early, with the fix, instead of dying half-way on a full disk.
need_free_disk() {
  local want_gb="$1" path="$2" have_kb
  have_kb=$(df -Pk "$path" | awk 'NR==2 {print $4}')
  if [ "$have_kb" -lt $((want_gb * 1024 * 1024)) ]; then
    die "only $((have_kb / 1024 / 1024)) GiB free on $(df -P "$path" | awk 'NR==2 {print $6}'), set-up needs about ${want_gb} GiB. Fix: free disk space, or set RATCHET_HOME to a larger disk."
  fi
}

# A cache outside the clone, shared by every clone on this machine: built binaries keyed by their
# recipe hash (version, flags, toolchain), so a fresh clone's set-up copies what an earlier clone built
# instead of relinking it (the Temporal server took ~4 minutes to relink on a busy 2-core machine even
# with Go's caches warm). pip's, npm's and Go's own caches are machine-wide already (their defaults).
export RATCHET_MACHINE_CACHE="${RATCHET_MACHINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ratchet}"

# machine_cached NAME HASH FILE... : true when every FILE's basename is in the machine cache under
# NAME/HASH; copies them to FILE (the copy happens only when all are there).
machine_cached() {
  local dir="$RATCHET_MACHINE_CACHE/$1/$2"; shift 2
  [ -f "$dir/.complete" ] || return 1
  local f; for f in "$@"; do [ -x "$dir/$(basename "$f")" ] || return 1; done
  for f in "$@"; do mkdir -p "$(dirname "$f")"; cp "$dir/$(basename "$f")" "$f.tmp.$$" && mv "$f.tmp.$$" "$f"; done
  log "$1 from the machine cache ($dir)"
}

# machine_cache_put NAME HASH FILE... : keeps the FILEs in the machine cache under NAME/HASH (best
# effort: a cache that cannot be written only costs the next clone a rebuild).
machine_cache_put() {
  local dir="$RATCHET_MACHINE_CACHE/$1/$2"; shift 2
  local tmp; tmp=$(mktemp -d "${dir}.tmp.XXXXXX" 2>/dev/null) || { mkdir -p "$(dirname "$dir")" && tmp=$(mktemp -d "${dir}.tmp.XXXXXX"); } || return 0
  cp "$@" "$tmp/" && touch "$tmp/.complete" && { rm -rf "$dir"; mv "$tmp" "$dir"; } || rm -rf "$tmp"
  return 0
}

# machine_cached_dir NAME HASH DIR : DIR as the machine cache's NAME/HASH, copied (not linked: a model's
# files could be opened for writing); true when the cache had it.
machine_cached_dir() {
  local src="$RATCHET_MACHINE_CACHE/$1/$2" dst="$3" tmp="$3.tmp.$$"
  [ -f "$src/.complete" ] || return 1
  rm -rf "$tmp"; mkdir -p "$(dirname "$dst")"
  cp -a "$src/dir" "$tmp" || { rm -rf "$tmp"; return 1; }
  rm -rf "$dst"; mv "$tmp" "$dst"
  log "$1 from the machine cache ($src)"
}

# machine_cache_put_dir NAME HASH DIR : keeps a copy of DIR in the machine cache under NAME/HASH; other
# hashes of NAME go (best effort, as machine_cache_put).
machine_cache_put_dir() {
  local dir="$RATCHET_MACHINE_CACHE/$1" tmp
  mkdir -p "$dir" && tmp=$(mktemp -d "$dir/.tmp.XXXXXX") || return 0
  if cp -a "$3" "$tmp/dir" && touch "$tmp/.complete"; then
    find "$dir" -mindepth 1 -maxdepth 1 ! -name "$(basename "$tmp")" -exec rm -rf {} +
    mv "$tmp" "$dir/$2"
  else
    rm -rf "$tmp"
  fi
  return 0
}

# link_from_cache NAME KEY DST [SUBDIR] : DST as the machine cache's NAME/KEY, hard-linked (a copy where the
# cache is on another filesystem); true when the cache had it. Files under DST/SUBDIR that name the path the
# tree was cached from are rewritten to name DST (sed -i writes a new file, so the cached one is untouched).
# For trees that are only read once installed (venvs, node_modules): a file written in place would change
# the cache's too.
link_from_cache() {
  local src="$RATCHET_MACHINE_CACHE/$1/$2" dst="$3" sub="${4:-}" tmp="$3.tmp.$$"
  [ -f "$src/.complete" ] && [ -f "$src/.origin" ] || return 1
  local origin; origin=$(cat "$src/.origin")
  rm -rf "$tmp"; mkdir -p "$(dirname "$dst")"
  cp -al "$src/tree" "$tmp" 2>/dev/null || { rm -rf "$tmp"; cp -a "$src/tree" "$tmp"; } || { rm -rf "$tmp"; return 1; }
  if [ -n "$sub" ]; then
    local files; files=$(grep -rlIF "$origin" "$tmp/$sub" || true)
    if [ -n "$files" ] && ! printf '%s\n' "$files" | xargs -d '\n' sed -i "s|$origin|$dst|g"; then
      rm -rf "$tmp"; return 1
    fi
  fi
  rm -rf "$dst"; mv "$tmp" "$dst"
  log "$1 from the machine cache ($src)"
}

# link_to_cache NAME KEY SRC : keeps SRC in the machine cache under NAME/KEY as hard links (best effort: a
# cache that cannot be written only costs the next clone an install). Other keys of NAME go.
link_to_cache() {
  local dir="$RATCHET_MACHINE_CACHE/$1" tmp
  mkdir -p "$dir" && tmp=$(mktemp -d "$dir/.tmp.XXXXXX") || return 0
  if { cp -al "$3" "$tmp/tree" 2>/dev/null || { rm -rf "$tmp/tree"; cp -a "$3" "$tmp/tree"; }; } \
     && printf '%s' "$3" >"$tmp/.origin" && touch "$tmp/.complete"; then
    find "$dir" -mindepth 1 -maxdepth 1 ! -name "$(basename "$tmp")" -exec rm -rf {} +
    mv "$tmp" "$dir/$2"
  else
    rm -rf "$tmp"
  fi
  return 0
}

# venv_from_cache NAME KEY / venv_to_cache NAME KEY : $RATCHET_VENVS/NAME from and to the machine cache's
# venvs/NAME/KEY. A fresh clone's set-up then links ~12 GB of venvs in seconds instead of pip unpacking
# them again from its wheel cache (torch twice: the trainer's venv and vLLM's). The scripts in bin/ name
# their interpreter by the path the venv was built at, and are rewritten. KEY must cover everything the
# venv was built from, the interpreter included (venv_key); what a clone adds to its venv (an editable
# install, a .pth naming the clone) is added after, outside the cache.
venv_from_cache() { link_from_cache "venvs/$1" "$2" "$RATCHET_VENVS/$1" bin; }
venv_to_cache() { link_to_cache "venvs/$1" "$2" "$RATCHET_VENVS/$1"; }

# venv_install NAME KEY WHAT PIP_ARGS... : $RATCHET_VENVS/NAME from the machine cache under KEY, or else the venv
# (made with $PYTHON if missing) with pip upgraded and `pip install PIP_ARGS` (WHAT says what, in the log),
# then kept in the cache under KEY.
venv_install() {
  local name=$1 key=$2 what=$3; shift 3
  venv_from_cache "$name" "$key" && return 0
  local venv; venv=$(venv_for "$name")
  log "installing $what into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q "$@"
  venv_to_cache "$name" "$key"
}

# venv_key HASH : the machine cache's key for a venv built from recipe HASH with $PYTHON (the interpreter it
# resolves to, not a pyenv shim's path, and its full version).
venv_key() { RECIPE_EXTRA="$1 $("$PYTHON" -c 'import sys; print(sys.executable, sys.version)')" recipe_hash /dev/null; }

# venv_for NAME : creates $RATCHET_VENVS/NAME if missing and prints its path.
venv_for() {
  local dir="$RATCHET_VENVS/$1"
  [ -x "$dir/bin/python" ] || "$PYTHON" -m venv "$dir"
  printf '%s' "$dir"
}

apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  [ -f "$RATCHET_STAMPS/apt-updated" ] || { apt-get update -qq && touch "$RATCHET_STAMPS/apt-updated"; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}
