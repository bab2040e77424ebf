#!/usr/bin/env bash
# Records workflow histories for the replay test into test/fixtures/histories/v<package.json version>/
# (README: "Upgrading under running runs"). Run it when a release changes workflow code,
# before the release: older releases' folders are never written, so CI keeps replaying
# every history a running run could have. With --stack it also records from the real
# stack's integration runs (needs `bin/ratchet up`); without, only the fake-activity runs.
source "$(dirname "$0")/lib.sh"
cd "$RATCHET_ROOT"
export RATCHET_RECORD_HISTORIES=1
release="v$(node -p 'require("./package.json").version')"
log "recording histories into test/fixtures/histories/$release"
# TrainRun's own tests and StepRollouts' waits (the blocks of these files that this script has always recorded).
npx jest --selectProjects unit --runTestsByPath test/unit/workflows/trainRun.test.ts test/unit/workflows/stepRollouts.test.ts \
  -t '^(TrainRun workflow|StepRollouts waits) \(fake activities, real dev server\) '
if [ "${1:-}" = "--stack" ]; then
  npx jest --selectProjects integration --runInBand --runTestsByPath test/integration/lifecycle.test.ts test/integration/eval-real.test.ts
fi
npx jest --selectProjects unit --runTestsByPath test/unit/workflows/replay.test.ts
git status --short "test/fixtures/histories/$release"
