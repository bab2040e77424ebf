/**
 * Upgrading under a running run by Worker Versioning (docs/upgrades.md), on a real dev
 * server with fake activities: a run starts on build A; build B (a second worker with
 * a different build id and a workflow change that is not behind patched()) is deployed
 * and made current mid-run; A is retired once the run has moved. The run finishes, the
 * steps before the boundary ran on A and the steps after it on B, no workflow task
 * failed (no non-determinism error), and A's history still replays on today's code.
 */
import { Worker, type WorkflowBundle } from '@temporalio/worker';
import type { WorkerDeploymentVersion } from '@temporalio/common';
import { describeWithStack } from '../../helpers/stack';
import type { TrainRun } from '../../../src/workflows/trainRun';
import { makeFakes, useFakeWorld, workflowBundle } from '../../helpers/fakeWorld';
import { recordHistory } from '../../helpers/histories';
import { describeDeployment, setCurrentBuild } from '../../../src/deploy/upgrade';

jest.setTimeout(180_000);

describeWithStack('TrainRun upgrade by worker deployment (fake activities, real dev server)', ['temporalBinary'], () => {
  const world = useFakeWorld();
  let bundleB: WorkflowBundle;
  beforeAll(async () => {
    bundleB = await workflowBundle(require.resolve('../../fixtures/upgrade/workflowsB'));
  }, 240_000);

  test('a run started on build A moves to build B at a step boundary; A retires; no non-determinism', async () => {
    const deploymentName = `ratchet-upgrade-${process.pid}`;
    const fakes = makeFakes({ orchestrator: { max_steps: 5, async_level: 1 }, trainMs: 700, rolloutMs: 20 });
    const conn = world.env.nativeConnection;
    const versioned = (buildId: string, workflowBundle: WorkflowBundle) => Worker.create({
      connection: conn, taskQueue: 'ratchet', workflowBundle, activities: fakes.main,
      workerDeploymentOptions: { version: { deploymentName, buildId } satisfies WorkerDeploymentVersion, useWorkerVersioning: true, defaultVersioningBehavior: 'PINNED' },
    });
    // Rollout and trainer workers stay unversioned: they run activities only.
    const others = await Promise.all([
      Worker.create({ connection: conn, taskQueue: 'ratchet-rollout', activities: fakes.rollout }),
      Worker.create({ connection: conn, taskQueue: 'ratchet-trainer', activities: fakes.announce }),
      ...['w1', 'w2'].map((w) => Worker.create({ connection: conn, taskQueue: `trainer-${w}`, activities: fakes.trainerFor(w), shutdownGraceTime: '1 second' })),
    ]);
    const running = others.map((w) => w.run());
    const workerA = await versioned('A', world.bundle);
    const runningA = workerA.run();
    let workerB: Worker | undefined;
    let runningB: Promise<void> | undefined;
    try {
      await setCurrentBuild(world.env.client, deploymentName, 'A');
      const runId = `upgrade-${process.pid}`;
      // continue-as-new only for the upgrade: the regular cadence is far away.
      const handle = await world.env.client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId, continueAsNewEvery: 100 }],
      });
      const firstRunId = handle.firstExecutionRunId;
      await until(() => fakes.records.length >= 1);

      // Deploy B and make it current (what `ratchet upgrade` does).
      workerB = await versioned('B', bundleB);
      runningB = workerB.run();
      await setCurrentBuild(world.env.client, deploymentName, 'B');
      expect((await describeDeployment(world.env.client, deploymentName)).current).toBe(`${deploymentName}.B`);

      // Retire A once the run has moved off it (its first step on B is recorded).
      await until(() => fakes.records.some((r) => r.record.build?.build_id === 'B'));
      workerA.shutdown();
      await runningA;

      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 5, stopped: 'completed' });

      const builds = fakes.records.map((r) => [r.record.step, r.record.build?.build_id]);
      const firstB = builds.findIndex(([, b]) => b === 'B');
      // Steps 0..k on A, k+1.. on B: one boundary, at a step boundary, no step run twice or lost.
      expect(builds.map(([s]) => s)).toEqual([0, 1, 2, 3, 4]);
      expect(firstB).toBeGreaterThan(0);
      expect(builds.slice(0, firstB).every(([, b]) => b === 'A')).toBe(true);
      expect(builds.slice(firstB).every(([, b]) => b === 'B')).toBe(true);
      for (const r of fakes.records) expect(r.record.build?.deployment).toBe(deploymentName);

      // Step children are pinned to their parent's build.
      for (const [s, b] of builds) {
        const child = await world.env.client.workflow.getHandle(`${runId}-step-${s}-rollouts`).describe();
        expect(child.raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion?.buildId).toBe(b);
      }

      // No workflow task failed anywhere in the chain (a non-determinism error would show as one).
      const executions: string[] = [];
      for await (const w of world.env.client.workflow.list({ query: `WorkflowId = '${runId}'` })) executions.push(w.runId);
      expect(executions.length).toBe(2);
      for (const execRunId of executions) {
        const events = (await world.env.client.workflow.getHandle(runId, execRunId).fetchHistory()).events ?? [];
        expect(events.filter((e) => e.workflowTaskFailedEventAttributes)).toEqual([]);
      }
      // A's history (today's code) is kept for the replay test; B's execution has B's test-only timer.
      await recordHistory(world.env.client.workflow.getHandle(runId, firstRunId), 'trainrun-upgrade-build-a');
    } finally {
      workerB?.shutdown();
      if (workerA.getState() === 'RUNNING') workerA.shutdown();
      for (const w of others) w.shutdown();
      await Promise.all([...running, runningA, ...(runningB ? [runningB] : [])]);
    }
  });
});

async function until(check: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 100));
  }
}
