import { orderByStackUse, stackRank } from '../../helpers/integrationOrder';

const test_ = (file: string, project = 'integration') => ({ path: `/repo/test/integration/${file}`, context: { config: { displayName: { name: project } } } });

describe('integration suite order (test/helpers/integrationOrder.js)', () => {
  test('a suite that calls useStackWorkers or takeOverStackWorkers takes the stack over; multihost also stops its vLLM', () => {
    expect(stackRank('/r/test/integration/faults.test.ts', "const stack = useStackWorkers('faults');")).toBe(1);
    expect(stackRank('/r/test/integration/upgrade.test.ts', 'restoreStackWorkers = await takeOverStackWorkers();')).toBe(1);
    expect(stackRank('/r/test/integration/rollouts.test.ts', "import { tinyConfig } from '../helpers/trainrunStack';")).toBe(0);
    expect(stackRank('/r/test/integration/multihost.test.ts', 'restoreStackWorkers = await takeOverStackWorkers();')).toBe(2);
    expect(stackRank('/r/test/integration/bench-learn.test.ts', 'runAgentBench(')).toBe(0.5);
  });

  test('plain suites first, bench-learn last of them, then the takeovers, then multihost; jest\'s order kept within each group; unit suites untouched', () => {
    const sources: Record<string, string> = {
      'multihost.test.ts': 'takeOverStackWorkers()',
      'faults.test.ts': 'useStackWorkers(',
      'bench-learn.test.ts': 'runAgentBench(',
      'lifecycle.test.ts': 'useStackWorkers(',
      'rollouts.test.ts': '',
      'supervisor.test.ts': '',
    };
    const jestOrder = ['multihost.test.ts', 'faults.test.ts', 'bench-learn.test.ts', 'lifecycle.test.ts', 'rollouts.test.ts', 'supervisor.test.ts'].map((f) => test_(f));
    const ordered = orderByStackUse(jestOrder, (p) => sources[p.split('/').pop()!]!);
    expect(ordered.map((t) => t.path.split('/').pop())).toEqual([
      'rollouts.test.ts', 'supervisor.test.ts', 'bench-learn.test.ts', 'faults.test.ts', 'lifecycle.test.ts', 'multihost.test.ts',
    ]);
    // A unit suite's source is never read, and a unit run keeps jest's order.
    const unit = [test_('b.test.ts', 'unit'), test_('a.test.ts', 'unit')];
    expect(orderByStackUse(unit, () => { throw new Error('read a unit suite'); })).toEqual(unit);
  });
});
