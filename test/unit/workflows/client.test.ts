/**
 * startOrAttach: what a restarted caller (a resumed `bench:learn`) relies on. Against a real dev server:
 * the same id while the workflow runs hands back that execution; once it has finished, the recorded
 * outcome, and no second execution is started under the id.
 */
import { Worker } from '@temporalio/worker';
import { startOrAttach } from '../../../src/workflows/client';
import { useFakeWorld } from '../../helpers/fakeWorld';
import { describeWithStack } from '../../helpers/stack';

jest.setTimeout(120_000);

describeWithStack('startOrAttach (real dev server)', ['temporalBinary'], () => {
  const world = useFakeWorld({ workflowsPath: require.resolve('../../fixtures/workflows/trainRunStub') });

  /** Every execution the server holds under `workflowId`, newest first. */
  async function executions(workflowId: string): Promise<string[]> {
    const runs: string[] = [];
    for await (const w of world.env.client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) runs.push(w.runId);
    return runs;
  }

  it('attaches to a running execution, then reads back the finished one without starting another', async () => {
    const opts = { taskQueue: 'soa-queue', workflowId: 'soa-1' };
    // Nothing polls the queue yet: the first execution stays RUNNING.
    const first = await startOrAttach(world.env.client, 'TrainRun', opts);
    const firstRun = (await first.describe()).runId;
    const again = await startOrAttach(world.env.client, 'TrainRun', opts);
    expect((await again.describe()).runId).toBe(firstRun);

    const worker = await Worker.create({ connection: world.env.nativeConnection, taskQueue: 'soa-queue', workflowBundle: world.bundle });
    await worker.runUntil(first.result());
    const closed = await startOrAttach(world.env.client, 'TrainRun', opts);
    await expect(closed.result()).resolves.toEqual({ status: 'completed' });
    expect((await closed.describe()).runId).toBe(firstRun);
    // Visibility is eventually consistent on the dev server: wait for the one execution to be listed.
    let listed: string[] = [];
    for (let i = 0; i < 50 && listed.length === 0; i++) { listed = await executions('soa-1'); await new Promise((r) => setTimeout(r, 100)); }
    expect(listed).toEqual([firstRun]);
  });

  it('a plain start under a finished id would run it again (what startOrAttach prevents)', async () => {
    const opts = { taskQueue: 'soa-queue-2', workflowId: 'soa-2' };
    const worker = await Worker.create({ connection: world.env.nativeConnection, taskQueue: 'soa-queue-2', workflowBundle: world.bundle });
    await worker.runUntil(async () => {
      const first = await world.env.client.workflow.start('TrainRun', opts);
      await first.result();
      const second = await world.env.client.workflow.start('TrainRun', opts);
      await second.result();
      expect(second.firstExecutionRunId).not.toBe(first.firstExecutionRunId);
    });
  });
});
