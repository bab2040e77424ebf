#!/usr/bin/env bash
# External agent harnesses, each unchanged from PyPI in its own virtualenv (their litellm pins differ):
#   .ratchet/venvs/harness-nano           nano-agent 5.0.0
#   .ratchet/venvs/harness-mini-swe-agent mini-swe-agent 2.4.6
# plus Ratchet's adapter package (harness/ratchet_harness: the sandbox environment classes and runners),
# put on each venv's path by a .pth file. Idempotent: stamped per harness under .ratchet/stamps.
source "$(dirname "$0")/lib.sh"

# A harness runs as an unprivileged user of its own (src/harness/run.ts), so its interpreter must be
# one every user may run: Debian's /usr/bin/python3, not a python under /root.
HARNESS_PYTHON="${RATCHET_HARNESS_PYTHON:-/usr/bin/python3}"
[ -x "$HARNESS_PYTHON" ] || die "$HARNESS_PYTHON is missing. Fix: apt-get install python3 python3-venv, or set RATCHET_HARNESS_PYTHON to a python every user can run"
for name in nano mini-swe-agent; do
  req="$RATCHET_ROOT/harness/requirements-$name.txt"
  hash=$(RECIPE_EXTRA="$RATCHET_ROOT $HARNESS_PYTHON $(readlink -f "$HARNESS_PYTHON")" recipe_hash "$req")
  if stamp_ok "harness-$name" "$hash"; then log "harness $name up to date"; continue; fi
  need_free_disk 1 "$RATCHET_HOME"
  venv="$RATCHET_VENVS/harness-$name"
  # The machine cache's copy has the packages only: the .pth below names this clone.
  key=$(PYTHON="$HARNESS_PYTHON" venv_key "$(recipe_hash "$req")")
  # Not in the cache: installed into a new venv, not over an older recipe's.
  venv_from_cache "harness-$name" "$key" || { rm -rf "$venv"; PYTHON="$HARNESS_PYTHON" venv_install "harness-$name" "$key" "harness $name" -r "$req"; }
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  printf '%s\n' "$RATCHET_ROOT/harness" >"$site/ratchet_harness.pth"
  case "$name" in
    nano) mod=nano ;;
    mini-swe-agent) mod=minisweagent ;;
  esac
  MSWEA_SILENT_STARTUP=1 LITELLM_LOCAL_MODEL_COST_MAP=True "$venv/bin/python" -c "import $mod, litellm, ratchet_harness" \
    || die "harness $name does not import. Fix: rm -rf $venv and run infra/harness-env.sh again"
  stamp_write "harness-$name" "$hash"
  log "harness $name ready"
done
