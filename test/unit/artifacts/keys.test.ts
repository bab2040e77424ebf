import * as fs from 'node:fs';
import * as path from 'node:path';
import { isEvalResultKey, runKeys } from '../../../src/artifacts/keys';

/** The layout stored runs hold: the same fixture pins the Python trainer's checkpoint keys (trainer/tests/test_artifact_keys.py). */
const fixture = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'fixtures', 'artifacts', 'keys.json'), 'utf8')) as {
  cases: { fn: keyof typeof runKeys; args: (string | number)[]; key: unknown }[];
};

describe('artifact keys', () => {
  it.each(fixture.cases.map((c) => [`${c.fn}(${c.args.map((a) => JSON.stringify(a)).join(', ')})`, c] as const))('%s', (_name, c) => {
    const fn = runKeys[c.fn] as (...args: (string | number)[]) => unknown;
    expect(fn(...c.args)).toEqual(c.key);
  });

  it('covers every key of the layout', () => {
    expect(new Set(fixture.cases.map((c) => c.fn))).toEqual(new Set(Object.keys(runKeys)));
  });

  it('tells an eval result from an eval trajectory', () => {
    expect(isEvalResultKey(runKeys.evalResult('r1', 3, 'abc'))).toBe(true);
    expect(isEvalResultKey(runKeys.trajectory('r1', -1, 'g', 0))).toBe(false);
    expect(isEvalResultKey('runs/r1/evals/trajectories/x.json')).toBe(false);
    expect(isEvalResultKey(runKeys.config('r1'))).toBe(false);
  });
});
