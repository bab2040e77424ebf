#!/usr/bin/env bash
# What the deployment-file test (test/unit/infra/deployFiles.test.ts) needs: systemd's own unit checker
# (`systemd-analyze verify`, Debian's systemd package) and a Kubernetes schema validator from PyPI
# (kubernetes-validate ships the API schemas, so it validates offline) in its own small venv.
source "$(dirname "$0")/lib.sh"

apt_install systemd
hash=$(recipe_hash "$RATCHET_ROOT/infra/deploy/requirements.txt")
if stamp_ok deploy-env "$hash"; then log "deploy env up to date"; exit 0; fi
venv="$RATCHET_VENVS/deploy"
venv_install deploy "$(venv_key "$hash")" "the deployment checkers (kubernetes-validate)" -r "$RATCHET_ROOT/infra/deploy/requirements.txt"
"$venv/bin/kubernetes-validate" --version >/dev/null \
  || die "the deploy environment has no working kubernetes-validate. Fix: rm -rf $venv and run infra/deploy-env.sh again"
stamp_write deploy-env "$hash"
log "deploy env ready"
