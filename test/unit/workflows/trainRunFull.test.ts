/**
 * trainer.mode = "full" in TrainRun (fake activities, real dev server; issue 41): every weight sync is a
 * full one, naming the checkpoint of the version it serves (the base model at version 0, synced before
 * the first rollout); the rollouts ask for the served model at every version, never an adapter name;
 * the steps record no adapter. A LoRA run's syncs and model names are as before (no `full`).
 */
import { WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { describeWithStack } from '../../helpers/stack';
import { progressQuery, setSettingsUpdate } from '../../../src/workflows/messages';
import type { TrainRun } from '../../../src/workflows/trainRun';
import { makeFakes, type FakeOptions } from '../../helpers/workflowFakes';
import { inNamespace, useFakeWorld, withFakeWorkers } from '../../helpers/fakeWorld';

jest.setTimeout(120_000);

describeWithStack('TrainRun, trainer.mode = "full" (fake activities, real dev server)', ['temporalBinary'], () => {
  // The tests mostly wait (a 5 s inference wait, round trips), so they run at once (test.concurrent), each in a namespace of its own.
  const world = useFakeWorld({ concurrent: 5 });
  const withFakes = <T>(fakes: ReturnType<typeof makeFakes>, fn: (fakes: ReturnType<typeof makeFakes>, client: Client) => Promise<T>): Promise<T> =>
    inNamespace(world, (ns) => withFakeWorkers(world, fakes, { trainers: ['w1'], namespace: ns }, (f, stack) => fn(f, stack.client)));
  const withWorkers = <T>(opts: FakeOptions, fn: (fakes: ReturnType<typeof makeFakes>, client: Client) => Promise<T>): Promise<T> => withFakes(makeFakes(opts), fn);

  let n = 0;
  const run = async (opts: FakeOptions) => withWorkers(opts, async (f, client) => {
    const runId = `full-${process.pid}-${++n}`;
    const handle = await client.workflow.start<typeof TrainRun>('TrainRun', {
      taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId }],
    });
    const result = await handle.result();
    return { f, runId, result };
  });

  test.concurrent('each sync reloads the full weights of its version from that version\'s checkpoint; rollouts ask for the served model', async () => {
    const { f, result } = await run({ trainer: { mode: 'full' }, orchestrator: { max_steps: 3, async_level: 1 } });
    expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 3, stopped: 'completed' });
    const served = f.config.inference.served_model;
    // Version 0 (the base model) before the first rollout, then each step's version from the checkpoint it saved.
    expect(f.syncs.map((s) => [s.policyVersion, s.full, s.checkpoint?.uri, s.adapter])).toEqual([
      [0, true, undefined, undefined],
      [1, true, expect.stringContaining('ckpt-step-0'), undefined],
      [2, true, expect.stringContaining('ckpt-step-1'), undefined],
      [3, true, expect.stringContaining('ckpt-step-2'), undefined],
    ]);
    expect(f.manifestInputs.map((m) => m.modelName)).toEqual([served, served, served]);
    expect(f.records.map((r) => r.record.adapter)).toEqual([undefined, undefined, undefined]);
  });

  test.concurrent('a replica restarted mid-step (back on the base model) is noticed by the rollouts and re-synced with the step\'s checkpoint before they sample', async () => {
    const fakes = makeFakes({ trainer: { mode: 'full' }, orchestrator: { max_steps: 3 } });
    // One replica's weights: what the last sync loaded; the rollouts check them as src/agent/servedWeights.ts does.
    let served = 'base';
    const sampledFrom: { step: number; expected: string; served: string }[] = [];
    const sync = fakes.main.syncWeights;
    fakes.main.syncWeights = async (i) => { const r = await sync(i); served = i.checkpoint?.uri ?? 'base'; return r; };
    const rollout = fakes.rollout.rollout;
    let started = 0;
    fakes.rollout.rollout = async (i) => {
      // vLLM restarts after step 1's first rollout: it comes back on the base model.
      if (i.step === 1 && ++started === 2) served = 'base';
      const expected = i.fullWeights?.checkpoint ?? 'base';
      if (served !== expected) {
        const { ApplicationFailure } = await import('@temporalio/common');
        throw ApplicationFailure.create({ type: 'InferenceUnavailable', message: `replica serves ${served}, not ${expected} (fake)` });
      }
      sampledFrom.push({ step: i.step, expected, served });
      return rollout(i);
    };
    await withFakes(fakes, async (f, client) => {
      const runId = `full-${process.pid}-${++n}`;
      const handle = await client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId }],
      });
      expect(await handle.result()).toMatchObject({ stepsCompleted: 3, policyVersion: 3, stopped: 'completed' });
      // Each step's manifest names the checkpoint its version serves (none at version 0).
      expect(f.manifestInputs.map((m) => m.fullWeights?.checkpoint)).toEqual([undefined, expect.stringContaining('ckpt-step-0'), expect.stringContaining('ckpt-step-1')]);
      // Version 1 synced once for step 1, then again after the restart (the chunk's InferenceUnavailable), same checkpoint.
      const v1 = f.syncs.filter((s) => s.policyVersion === 1);
      expect(v1.map((s) => [s.full, s.checkpoint?.uri])).toEqual([[true, expect.stringContaining('ckpt-step-0')], [true, expect.stringContaining('ckpt-step-0')]]);
      expect(f.syncs.map((s) => s.policyVersion)).toEqual([0, 1, 1, 2, 3]);
      // Every rollout sampled from its own version's weights, and every rollout of the run ran.
      expect(sampledFrom.filter((r) => r.served !== r.expected)).toEqual([]);
      const total = f.config.orchestrator.batch_size * f.config.orchestrator.rollouts_per_example;
      expect(new Set(sampledFrom.map((r) => `${r.step}`)).size).toBe(3);
      expect(sampledFrom.length).toBe(3 * total);
    });
  });

  test.concurrent('ratchet set --eval-every on a full run is refused by the update\'s validator, with the fix', async () => {
    await withWorkers({ trainer: { mode: 'full' }, inferenceDownTimes: 1 }, async (_f, client) => {
      const runId = `full-${process.pid}-${++n}`;
      const handle = await client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId }],
      });
      // The version-0 sync fails once: the run waits (5 s) with its config loaded.
      while ((await handle.query(progressQuery)).status !== 'waiting-for-inference') await new Promise((r) => setTimeout(r, 100));
      const err = await handle.executeUpdate(setSettingsUpdate, { args: [{ eval_every_steps: 2, reason: 'see progress' }] }).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(WorkflowUpdateFailedError);
      expect(((err as WorkflowUpdateFailedError).cause as Error).message).toMatch(/^eval_every_steps: a full fine-tuning run .*Fix: evaluate its checkpoints on a vLLM of their own/);
      await handle.executeUpdate(setSettingsUpdate, { args: [{ eval_every_steps: 0, reason: 'off is fine' }] });
      expect(await handle.result()).toMatchObject({ stepsCompleted: 3, stopped: 'completed' });
    });
  });

  test.concurrent('a LoRA run is unchanged: adapter syncs without `full`, rollouts on <run>/policy-v<N>', async () => {
    const { f, runId } = await run({ orchestrator: { max_steps: 2 } });
    expect(f.syncs.map((s) => [s.policyVersion, 'full' in s, s.adapter?.uri])).toEqual([
      [1, false, expect.stringContaining('adapter-step-0')],
      [2, false, expect.stringContaining('adapter-step-1')],
    ]);
    expect(f.manifestInputs.map((m) => m.modelName)).toEqual([f.config.inference.served_model, `${runId}/policy-v1`]);
  });
});
