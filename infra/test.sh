#!/usr/bin/env bash
# The test command (npm test): set-up, the real stack up, then every suite:
# lint and types, jest unit + integration (real Temporal, Docker, vLLM, trainer),
# and the Python suites. Ends with one summary line: "N passed, N failed, N skipped".
source "$(dirname "$0")/lib.sh"
cd "$RATCHET_ROOT"

# In CI a missing component is a defect, not a reason to skip.
if [ "${CI:-}" = "true" ]; then export RATCHET_REQUIRE_STACK=1; fi

bash infra/setup.sh
# Only the tests need a browser: the report test renders the HTML report in headless Chromium.
apt_install chromium
bin/ratchet up

reports="$RATCHET_HOME/test-reports"; rm -rf "$reports"; mkdir -p "$reports"
status=0

log "lint + typecheck"
npx eslint src test || status=1
npx tsc -p tsconfig.test.json || status=1

log "jest: unit"
npx jest --selectProjects unit --json --outputFile="$reports/jest-unit.json" || status=1
log "jest: integration (real stack)"
npx jest --selectProjects integration --runInBand --json --outputFile="$reports/jest-integration.json" || status=1

log "pytest: trainer"
(cd trainer && "$RATCHET_VENVS/trainer/bin/python" -m pytest -q -rs --junitxml="$reports/pytest-trainer.xml") || status=1
log "pytest: taskgen"
(cd taskgen && "$RATCHET_VENVS/taskgen/bin/python" -m pytest -q -rs --junitxml="$reports/pytest-taskgen.xml") || status=1

node infra/summarize-tests.js "$reports" || status=1
exit $status
