/**
 * Per-task pass-rate pools: counts per task, the weight 4p(1-p) with its floor and exploration of unseen
 * tasks, and sampling that follows those weights (frequencies over many steps against the weights computed
 * here from the pass counts, not by poolWeight).
 */
import { sampleForStep } from '../../../src/activities/dataset';
import { emptyPool, poolCounts, poolWeight, updatePool } from '../../../src/samples/taskPool';

const r = (task: string, reward: number, stop = 'completed') => ({ task_id: task, reward, stop_reason: stop });

describe('pass-rate pools', () => {
  test('counts rollouts and passes per task; unscored rollouts say nothing', () => {
    let pool = updatePool(emptyPool(), 0, [r('a', 1), r('a', 0), r('b', 0), r('b', 0), r('c', 1), r('c', -1, 'infra_error')], 1);
    pool = updatePool(pool, 1, [r('a', 1), r('d', 0.5, 'setup_error')], 1);
    expect(pool.tasks).toEqual({ a: { rollouts: 3, passes: 2 }, b: { rollouts: 2, passes: 0 }, c: { rollouts: 1, passes: 1 } });
    expect(pool.step).toBe(1);
    expect(poolCounts(pool)).toEqual({ tasks: 3, sometimes: 1 });
  });

  test('weights: 1 for an unseen task and at p = 0.5, the floor for always and never', () => {
    expect(poolWeight(undefined, 0.05)).toBe(1);
    expect(poolWeight({ rollouts: 4, passes: 2 }, 0.05)).toBe(1);
    expect(poolWeight({ rollouts: 4, passes: 1 }, 0.05)).toBeCloseTo(0.75, 12);
    expect(poolWeight({ rollouts: 4, passes: 0 }, 0.05)).toBe(0.05);
    expect(poolWeight({ rollouts: 4, passes: 4 }, 0.05)).toBe(0.05);
  });

  test('sampling follows the pool: tasks solved sometimes and unseen ones first, always/never rarely', () => {
    const ids = ['half', 'never', 'always', 'quarter', 'unseen'];
    const pool = updatePool(emptyPool(), 0, [
      r('half', 1), r('half', 0), r('never', 0), r('never', 0), r('always', 1), r('always', 1),
      r('quarter', 1), r('quarter', 0), r('quarter', 0), r('quarter', 0),
    ], 1);
    const floor = 0.05;
    // Expected shares from the pass counts: 4p(1-p), floored; unseen 1.
    const p = { half: 0.5, never: 0, always: 1, quarter: 0.25 } as Record<string, number>;
    const w = ids.map((id) => (id in p ? Math.max(4 * p[id]! * (1 - p[id]!), floor) : 1));
    const total = w.reduce((a, b) => a + b, 0);
    const counts = new Map<string, number>();
    const steps = 4000;
    for (let step = 0; step < steps; step++) {
      const [t] = sampleForStep({ runId: 'r', step, seed: 3, batchSize: 1, taskSetDir: '/x', envs: [{ id: 'e', dataset: 'd', weight: 1 }] }, [ids], ['/x/d'], { pool, floor });
      counts.set(t!.instanceId, (counts.get(t!.instanceId) ?? 0) + 1);
    }
    ids.forEach((id, i) => expect(Math.abs((counts.get(id) ?? 0) / steps - w[i]! / total)).toBeLessThan(0.025));
  });

  test('a step samples without repeats while untaken tasks remain, the same way every time', () => {
    const ids = Array.from({ length: 6 }, (_, i) => `t${i}`);
    const pool = updatePool(emptyPool(), 0, [r('t0', 0), r('t1', 1), r('t1', 0)], 1);
    const input = { runId: 'r', step: 5, seed: 1, batchSize: 6, taskSetDir: '/x', envs: [{ id: 'e', dataset: 'd', weight: 1 }] };
    const a = sampleForStep(input, [ids], ['/x/d'], { pool, floor: 0.05 });
    expect(new Set(a.map((t) => t.instanceId)).size).toBe(6);
    expect(sampleForStep(input, [ids], ['/x/d'], { pool, floor: 0.05 })).toEqual(a);
  });
});
