/**
 * jest's test order (jest.config.js testSequencer), for the real-stack suites: jest's own order (failed first,
 * then slowest first), except that the suites that take the stack's workers over (useStackWorkers,
 * takeOverStackWorkers: their own workers with a private artifact root) run after every other suite, and
 * multihost.test.ts, which also stops the stack's vLLM (this machine holds one), runs last. So when
 * infra/test.sh defers giving the stack back (RATCHET_DEFER_STACK_RESTORE=1), no suite after a takeover needs
 * the stack's workers or vLLM, and CI skips the ~8 s restart of the workers after each takeover suite and the
 * ~50 s vLLM start after multihost. Among the suites that use the stack as it is, bench-learn.test.ts (CPU-bound
 * throughout: SFT, sampling and training on both cores) runs last: the trainer's Python suite, niced torch work
 * that infra/test.sh starts before lint, is still running during the stage's first minutes, and on two cores the
 * two slowed each other (bench-learn 207-327 s beside it in CI, 86-120 s after it); the suites that mostly wait
 * leave it the idle cores instead. Unit suites keep jest's order.
 * Plain CommonJS: jest loads its sequencer with require, outside the TypeScript transform.
 */
const { readFileSync } = require('node:fs');
const path = require('node:path');
const Sequencer = require('@jest/test-sequencer').default;

/** Runs after every other suite: it stops the stack's vLLM as well as its workers. */
const LAST = ['multihost.test.ts'];

/** Uses the stack as it is, but after the other such suites: CPU-bound from start to end. */
const LAST_OF_PLAIN = ['bench-learn.test.ts'];

/** 0: uses the stack as it is; 0.5: so, CPU-bound; 1: takes the stack's workers over; 2: also stops its vLLM. */
function stackRank(file, source) {
  if (LAST.includes(path.basename(file))) return 2;
  if (/\b(useStackWorkers|takeOverStackWorkers)\(/.test(source)) return 1;
  return LAST_OF_PLAIN.includes(path.basename(file)) ? 0.5 : 0;
}

/** `tests` (jest's order) with the integration suites stably grouped by stackRank; `sourceOf(path)` reads a file. */
function orderByStackUse(tests, sourceOf) {
  const rank = (t) => (t.context.config.displayName?.name === 'integration' ? stackRank(t.path, sourceOf(t.path)) : 0);
  return tests.map((t, i) => ({ t, i, r: rank(t) })).sort((a, b) => a.r - b.r || a.i - b.i).map((x) => x.t);
}

class IntegrationOrder extends Sequencer {
  async sort(tests) {
    return orderByStackUse(await super.sort(tests), (p) => readFileSync(p, 'utf8'));
  }
}

// jest takes `default` (an __esModule object); the unit test (test/unit/helpers/integrationOrder.test.ts) the functions.
module.exports = { __esModule: true, default: IntegrationOrder, orderByStackUse, stackRank };
