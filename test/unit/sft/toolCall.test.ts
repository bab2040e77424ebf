/**
 * Scripted tool calls carry their arguments as the server will hand them back (src/sft/solvers/toolCall.ts):
 * checked against Python's own json.dumps(..., ensure_ascii=False), the call vLLM's hermes parser makes on
 * what the model wrote, so a policy fine-tuned on the demonstrations writes calls that survive the round trip.
 */
import { execFileSync } from 'node:child_process';
import { playPlan } from '../../../src/sft/solvers/plan';
import { sweGrepSolver } from '../../../src/sft/solvers/sweGrep';
import { scriptedToolCall, servedJson } from '../../../src/sft/solvers/toolCall';

const python = (() => {
  try {
    execFileSync('python3', ['-c', 'pass']);
    return true;
  } catch {
    return false;
  }
})();

/** Python's json.dumps of each value (read from JSON), one line each. */
function pythonDumps(values: unknown[]): string[] {
  const code = 'import json,sys\nfor v in json.load(sys.stdin): print(json.dumps(v, ensure_ascii=False))';
  return execFileSync('python3', ['-c', code], { input: JSON.stringify(values), encoding: 'utf8' }).trimEnd().split('\n');
}

const VALUES: unknown[] = [
  { command: 'grep -rnE "^\\s*(def|class)\\s+(a|b)\\b" --include=\'*.py\' . | head -20' },
  { files: ['src/a.py', 'pkg/b.py'], functions: ['src/a.py::f'] },
  { nested: { list: [1, 2, { x: null, y: true, z: false }], empty: {}, none: [] }, n: -3, f: 2.5 },
  { text: 'naïve café ✓ 日本\ttab\nline "quoted" \\ back / slash \u0001 ctl' },
  [],
  'plain',
];

(python ? describe : describe.skip)('servedJson writes what Python json.dumps writes', () => {
  test('every value, byte for byte', () => {
    expect(VALUES.map(servedJson)).toEqual(pythonDumps(VALUES));
  });

  test('the solvers\' calls round-trip through the server unchanged', async () => {
    const task = { FAIL_TO_PASS: ['tests/test_x.py::test_y'] };
    const first = await sweGrepSolver(task).complete({ messages: [{ role: 'user', content: 'find it' }] } as never);
    const planned = await playPlan([{ tool: 'view', args: { path: 'a.py', start: 1, end: 9 } }], 'done').complete({ messages: [] } as never);
    const args = [...first.tool_calls, ...planned.tool_calls].map((c) => c.function.arguments);
    expect(args).toHaveLength(2);
    expect(args).toEqual(pythonDumps(args.map((a) => JSON.parse(a) as unknown)));
    // The compact form is what the policy learned before: it does not survive.
    expect(JSON.stringify(JSON.parse(args[0]!))).not.toEqual(pythonDumps([JSON.parse(args[0]!)])[0]);
  });
});
if (!python) test.skip('SKIPPED: python3 is not on PATH; servedJson is unchecked against json.dumps', () => undefined);

test('a scripted call names its tool and numbers its id', () => {
  const a = scriptedToolCall('bash', { command: 'ls' });
  const b = scriptedToolCall('bash', { command: 'ls' });
  expect(a.function).toEqual({ name: 'bash', arguments: '{"command": "ls"}' });
  expect(a.id).not.toEqual(b.id);
});
