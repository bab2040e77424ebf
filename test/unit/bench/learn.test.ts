import { parse as parseToml } from 'smol-toml';
import { bootstrapCi, firstAndLastQuarter, LEARN_DEFAULTS, learnConfigToml, parseLearnArgs } from '../../../src/bench/learn';
import { RunConfig } from '../../../src/config/schema';

describe('bench:learn bootstrap interval', () => {
  test('brackets the mean, is deterministic, and narrows with more tasks', () => {
    const few = [0, 1, 0, 1, 1, 0];
    const a = bootstrapCi(few);
    expect(a.mean).toBeCloseTo(0.5);
    expect(a.lo).toBeLessThan(0.5);
    expect(a.hi).toBeGreaterThan(0.5);
    expect(bootstrapCi(few)).toEqual(a);
    const many = bootstrapCi(Array.from({ length: 60 }, (_, i) => i % 2));
    expect(many.hi - many.lo).toBeLessThan(a.hi - a.lo);
  });
});

describe('bench:learn options and configs', () => {
  test('flags override the defaults; bad values name the flag', () => {
    const o = parseLearnArgs(['--steps', '2', '--lr', '0', '--few-shot', 'false', '--tasks', 'plain', '--rubric', '']);
    expect(o).toEqual({ ...LEARN_DEFAULTS, steps: 2, lr: 0, fewShot: false, tasks: 'plain', rubric: '' });
    expect(() => parseLearnArgs(['--steps', 'ten'])).toThrow(/--steps: "ten"/);
    expect(() => parseLearnArgs(['--rollouts', '1'])).toThrow(/--rollouts.*>= 2/);
    expect(() => parseLearnArgs(['--tasks', 'grep'])).toThrow(/--tasks/);
    expect(() => parseLearnArgs(['--rubric', 'completion_bonus'])).toThrow(/--rubric: "completion_bonus"/);
  });

  test('the run and the control differ in name and lr only, and both are valid run configs', () => {
    const o = { ...LEARN_DEFAULTS, rubric: 'incorrect_files_penalty=0.25,completion_bonus=0.5' };
    const run = parseToml(learnConfigToml(o, 'bench-learn', 2e-4, '/tmp/t.jsonl')) as Record<string, unknown>;
    const control = parseToml(learnConfigToml(o, 'bench-learn-control', 0, '/tmp/t.jsonl')) as Record<string, unknown>;
    const parsed = RunConfig.parse(run);
    expect(parsed.trainer.optim.lr).toBe(2e-4);
    expect(RunConfig.parse(control).trainer.optim.lr).toBe(0);
    expect(parsed.env[0]!.rubric).toEqual({ incorrect_files_penalty: 0.25, completion_bonus: 0.5 });
    expect(parsed.env[0]!.args.max_turns).toBe(o.maxTurns);
    const strip = (c: Record<string, unknown>) => ({ ...c, name: undefined, trainer: { ...(c.trainer as object), optim: undefined } });
    expect(strip(run)).toEqual(strip(control));
  });

  test('first and last quarter of a curve', () => {
    expect(firstAndLastQuarter([0, 0, 1, 1, 1, 1, 2, 2])).toEqual([0, 2]);
    expect(firstAndLastQuarter([3])).toEqual([3, 3]);
  });
});
