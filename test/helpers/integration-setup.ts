import { appendFileSync } from 'node:fs';
import * as path from 'node:path';

// Real components on a 2-core machine: model turns and container starts take seconds.
jest.setTimeout(600_000);

// Each suite's wall time, appended to RATCHET_SUITE_TIMES (infra/test.sh sets it): a suite that would
// start past CI's hard stop names the slowest suites so far from this file (test/helpers/stack.ts).
const suiteTimes = process.env.RATCHET_SUITE_TIMES;
if (suiteTimes) {
  let started = 0;
  beforeAll(() => { started = Date.now(); });
  afterAll(() => {
    const suite = path.basename(expect.getState().testPath ?? 'unknown');
    appendFileSync(suiteTimes, `${suite}\t${((Date.now() - started) / 1000).toFixed(1)}\n`);
  });
}
