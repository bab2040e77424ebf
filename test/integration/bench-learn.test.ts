/**
 * bench:learn's short version (CI): the run and its lr-0 control, one step each, side by
 * side on the real stack (a second trainer worker), then their EvalSweeps and reports.
 * Whether it learns is the long bench's question (`npm run bench:learn`, 30 steps, out
 * of CI); this checks that the bench measures what it says: the control's adapter never
 * moves and the run's does, read from the checkpoints on disk, not from the trainer's
 * own metrics.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { LEARN_DEFAULTS, runLearnBench } from '../../src/bench/learn';
import { paths } from '../../src/shared/paths';
import { describeWithStack } from '../helpers/stack';
import { distBuilt } from './trainrunStack';

/** Whether any LoRA B matrix of the run's newest checkpoint holds a nonzero element (PEFT starts every B at zero). */
function loraBMoved(runId: string): boolean {
  const dir = path.join(paths.artifacts(), 'runs', runId, 'checkpoints');
  const newest = readdirSync(dir).filter((d) => d.startsWith('step-')).sort((a, b) => Number(a.split('-')[1]) - Number(b.split('-')[1])).pop();
  if (!newest) throw new Error(`no checkpoint in ${dir}`);
  const file = readFileSync(path.join(dir, newest, 'adapter', 'adapter_model.safetensors'));
  const headerLen = Number(file.readBigUInt64LE(0));
  const header = JSON.parse(file.subarray(8, 8 + headerLen).toString('utf8')) as Record<string, { data_offsets?: [number, number] }>;
  const bs = Object.entries(header).filter(([name, t]) => name.includes('lora_B') && t.data_offsets);
  if (bs.length === 0) throw new Error(`${newest}: no lora_B tensors in the adapter`);
  const data = file.subarray(8 + headerLen);
  // A float is zero when its bits are all zero (or -0: only the sign bit, which lr 0 cannot produce from +0 either).
  return bs.some(([, t]) => data.subarray(t.data_offsets![0], t.data_offsets![1]).some((byte) => byte !== 0));
}

describeWithStack('bench:learn (short): a run beside its lr-0 control', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  test('one step each: the control never moves, the run does; evals at v0 and v1; reports with the other run', async () => {
    if (!distBuilt()) throw new Error('dist/workers is missing: run npm run build first');
    if (!existsSync(path.join(paths.tasks(), 'train.jsonl'))) throw new Error(`no task set at ${paths.tasks()}: run bash infra/tasks.sh`);
    // Three groups of four in one step: a step whose groups all score alike has no advantage and moves nothing,
    // so three groups make "the run's adapter moved" all but certain to be tested (checked below, not assumed).
    // One step, not two of two groups: the same check in 12 rollouts and one training step a run (CI's budget).
    const o = { ...LEARN_DEFAULTS, steps: 1, batch: 3, evalTasks: 1, k: 2 };
    const r = await runLearnBench(o);

    for (const run of [r.learn, r.control]) {
      expect(run.records.map((s) => s.step)).toEqual([0]);
      expect(run.evals.map((e) => e.version)).toEqual([0, 1]);
      for (const e of run.evals) expect(e.episodes).toBe(o.evalTasks * o.k);
    }
    if (!r.learn.records.some((s) => s.reward_std > 0)) {
      throw new Error(`run ${r.learn.runId}: every episode of its step scored alike, so no gradient could move its adapter; rerun (rare: three groups without variance)`);
    }
    expect(loraBMoved(r.control.runId)).toBe(false);
    expect(loraBMoved(r.learn.runId)).toBe(true);

    expect(r.reports).toHaveLength(2);
    expect(readFileSync(r.reports[0]!, 'utf8')).toContain(`mean reward of run ${r.control.runId} at the same steps`);
    expect(readFileSync(r.reports[1]!, 'utf8')).toContain(`mean reward of run ${r.learn.runId} at the same steps`);
  }, 20 * 60_000);
});
