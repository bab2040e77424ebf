/**
 * Issue 39, items 2 and 9, on the chunked path (every config since 0.6), against a real Temporal dev
 * server with fake rollouts inside the real chunk activity: with no rollout worker polling and a
 * host's record saying it took itself out of service, the run shows waiting-for-healthy-rollout-hosts
 * naming the host and its error; the watch moves to a RolloutWorkersWait child that continues as new
 * (the step's own history stays small); once the host is back the step completes by itself.
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { describeWithStack } from '../../helpers/stack';
import { SA, progressQuery } from '../../../src/workflows/messages';
import type { TrainRun } from '../../../src/workflows/trainRun';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { healthKey } from '../../../src/rollouts/hostHealth';
import { makeFakes, useFakeWorld, withFakeWorkers } from '../../helpers/fakeWorld';

jest.setTimeout(240_000);

describeWithStack('rollout hosts out of service (chunked path, fake rollouts, real dev server)', ['temporalBinary'], () => {
  const world = useFakeWorld();

  /** Every execution of a workflow id. */
  async function executions(workflowId: string): Promise<number> {
    const found = [];
    for await (const execution of world.env.client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) found.push(execution.runId);
    return found.length;
  }

  test('every host out of service: waiting-for-healthy-rollout-hosts names it; the watch continues as new; the step goes on once the host is back', async () => {
    const healthStore = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-health-')));
    const since = new Date().toISOString();
    const sick = () => healthStore.putJson(healthKey('rollout-host-7:123'), {
      workerId: 'rollout-host-7:123', host: 'rollout-host-7', healthy: false,
      error: 'sandbox image ratchet-sandbox:latest is not on this host. Fix: bash infra/docker.sh setup', since, checkedAt: new Date().toISOString(),
    });
    await sick();
    const fakes = makeFakes({ healthStore, orchestrator: { batch_size: 2, rollouts_per_example: 4, rollouts_per_chunk: 4, max_steps: 1, max_concurrent_rollouts: 8 } });
    // No rollout worker polls until the host is back.
    await withFakeWorkers(world, fakes, { trainers: ['w1', 'w2'], rollouts: false }, async (_f, { startRolloutWorker }) => {
      const runId = `hosts-${process.pid}`;
      const handle: WorkflowHandle<typeof TrainRun> = await world.env.client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId,
        args: [{ configPath: 'configs/fake.toml', runId, rolloutWorkersWatchS: 1, outageWaits: { handoffAfter: 2, perExecution: 2, capS: 1 } }],
      });
      await waitFor(async () => (await handle.query(progressQuery)).status === 'waiting-for-healthy-rollout-hosts');
      const p = await handle.query(progressQuery);
      expect(p.unhealthyRolloutHosts).toEqual([{ host: 'rollout-host-7', error: expect.stringMatching(/^sandbox image .* is not on this host\. Fix:/), since }]);
      expect((await handle.describe()).typedSearchAttributes.get(SA.status)).toBe('waiting-for-healthy-rollout-hosts');
      // The watch moved to a child that continues as new; keep the record fresh meanwhile, as the sick worker does.
      const stepId = `${runId}-step-0-rollouts`;
      const childOf = async () => ((await world.env.client.workflow.getHandle(stepId).fetchHistory()).events ?? [])
        .map((e) => e.startChildWorkflowExecutionInitiatedEventAttributes)
        .filter((a) => a?.workflowType?.name === 'RolloutWorkersWait').map((a) => a!.workflowId!);
      await waitFor(async () => (await childOf()).length > 0);
      const child = (await childOf())[0]!;
      await waitFor(async () => { await sick(); return (await executions(child)) >= 2; });
      // The host is back: its worker polls again.
      await healthStore.putJson(healthKey('rollout-host-7:123'), { workerId: 'rollout-host-7:123', host: 'rollout-host-7', healthy: true, checkedAt: new Date().toISOString() });
      startRolloutWorker();
      expect(await handle.result()).toMatchObject({ stepsCompleted: 1, policyVersion: 1 });
      expect(fakes.batches.map((b) => fakes.summariesOf(b).length)).toEqual([8]);
      expect(fakes.events.filter((e) => e.what === 'rollout-start')).toHaveLength(8);
      // However long the wait, the step's own history holds a handful of checks and one child per change.
      const stepEvents = ((await world.env.client.workflow.getHandle(stepId).fetchHistory()).events ?? []).length;
      expect(stepEvents).toBeLessThan(120);
      expect((await handle.query(progressQuery)).status).toBe('completed');
    });
  });
});

async function waitFor(pred: () => Promise<boolean>, timeoutMs = 90_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 200));
  }
}
