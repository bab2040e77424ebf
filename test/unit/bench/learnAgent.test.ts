/** bench:learn's multi-turn figures (src/bench/learnAgent.ts), on small tables of cases. */
import { episodeBehaviour, heldOutSplit, pairedDifference } from '../../../src/bench/learnAgent';
import type { ChatMessage } from '../../../src/contracts/trajectory';

const callMsg = (name: string): ChatMessage => ({ role: 'assistant', content: '', tool_calls: [{ id: name, type: 'function', function: { name, arguments: '{}' } }] });
const tool: ChatMessage = { role: 'tool', content: 'out', tool_call_id: 'x' };
const turns = (n: number) => Array.from({ length: n }, () => ({}) as never);

describe('episodeBehaviour', () => {
  test.each([
    ['search then answer', [callMsg('bash'), tool, callMsg('bash'), tool, callMsg('result'), tool], 3, { toolCalls: 3, answered: true, searchedBeforeAnswer: true }],
    ['answer at once', [callMsg('result'), tool], 1, { toolCalls: 1, answered: true, searchedBeforeAnswer: false }],
    ['search, never answer', [callMsg('bash'), tool, { role: 'assistant', content: 'done' } as ChatMessage], 2, { toolCalls: 1, answered: false, searchedBeforeAnswer: false }],
    ['prose only', [{ role: 'assistant', content: 'src/a.py' } as ChatMessage], 1, { toolCalls: 0, answered: false, searchedBeforeAnswer: false }],
  ])('%s', (_name, msgs, n, want) => {
    expect(episodeBehaviour({ messages: [{ role: 'user', content: 'q' }, ...msgs], turns: turns(n) })).toEqual({ turns: n, ...want });
  });
});

describe('heldOutSplit', () => {
  const tasks = [...Array.from({ length: 10 }, (_, i) => ({ repo: 'boltons', id: `b${i}` })), ...Array.from({ length: 3 }, (_, i) => ({ repo: 'attrs', id: `a${i}` }))];
  test('the unseen package is all held out, random rows come from the rest, nothing trains twice, seeded', () => {
    const s = heldOutSplit(tasks, 'attrs', 3, 7);
    expect(s.unseenPackage.map((t) => t.id)).toEqual(['a0', 'a1', 'a2']);
    expect(s.randomRows).toHaveLength(3);
    expect(s.train).toHaveLength(7);
    expect(s.train.every((t) => t.repo === 'boltons')).toBe(true);
    expect(new Set([...s.train, ...s.randomRows].map((t) => t.id)).size).toBe(10);
    expect(heldOutSplit(tasks, 'attrs', 3, 7)).toEqual(s);
    expect(heldOutSplit(tasks, 'attrs', 3, 8).randomRows).not.toEqual(s.randomRows);
    expect(() => heldOutSplit(tasks, 'numpy', 3, 7)).toThrow(/no task comes from package "numpy".*boltons, attrs/);
  });
});

describe('pairedDifference', () => {
  test('per task: mean over the arm\'s seeds, run minus control; unpaired tasks counted, not used', () => {
    const run = new Map([['t1', [1, 1]], ['t2', [0.5, 0.5]], ['t3', [1]]]);
    const control = new Map([['t1', [0, 0]], ['t2', [0.5, 0.5]], ['t4', [0]]]);
    const d = pairedDifference(run, control);
    expect(d.tasks).toBe(2);
    expect(d.unpaired).toBe(2);
    expect(d.mean).toBeCloseTo(0.5, 10);
    expect(d.lo).toBeLessThanOrEqual(d.mean);
    expect(d.hi).toBeGreaterThanOrEqual(d.mean);
  });
  test('no difference gives an interval around 0', () => {
    const same = new Map(Array.from({ length: 20 }, (_, i) => [`t${i}`, [i % 3 === 0 ? 1 : 0]] as [string, number[]]));
    const d = pairedDifference(same, same);
    expect([d.mean, d.lo, d.hi]).toEqual([0, 0, 0]);
  });
});
