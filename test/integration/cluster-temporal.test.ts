/**
 * The self-hosted cluster (infra/cluster/): a Temporal server built from its Go module,
 * on Debian's PostgreSQL, started by the same script users run. A TypeScript worker
 * connects to it; a workflow started before the server is restarted completes after
 * it, which it can only do if its state was kept in PostgreSQL.
 */
import { rmSync } from 'node:fs';
import * as path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import * as activities from '../fixtures/workflows/roundTripActivities';
import { finishSignal } from '../fixtures/workflows/durable';
import { clusterCtl, clusterSql, TEST_CLUSTER } from '../helpers/cluster';
import { describeWithStack } from '../helpers/stack';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const c = TEST_CLUSTER;
const address = `${c.host}:${c.temporalPort}`;

describeWithStack('Temporal server on PostgreSQL (infra/cluster)', ['clusterServer', 'postgres', 'temporalBinary'], () => {
  let connection: Connection | undefined;
  let client: Client;

  beforeAll(() => {
    // A fresh cluster each run: the schema is applied from scratch by the server's SQL tool.
    try { clusterCtl(c, 'down'); } catch { /* nothing was running */ }
    rmSync(c.dir, { recursive: true, force: true });
    clusterCtl(c, 'start');
  }, 600_000);

  afterAll(async () => {
    await connection?.close();
    clusterCtl(c, 'down');
  }, 120_000);

  test('the schema came from the SQL tool and Ratchet\'s search attributes are registered', async () => {
    expect(clusterSql(c, 'temporal', 'SELECT curr_version FROM schema_version')).toMatch(/^1\.\d+$/);
    expect(clusterSql(c, 'temporal_visibility', 'SELECT curr_version FROM schema_version')).toMatch(/^1\.\d+$/);
    connection = await Connection.connect({ address });
    client = new Client({ connection });
    const custom = (await connection.operatorService.listSearchAttributes({ namespace: 'default' })).customAttributes ?? {};
    expect(Object.keys(custom)).toEqual(expect.arrayContaining(['RatchetStep', 'RatchetMeanReward', 'RatchetPolicyVersion', 'RatchetStatus', 'RatchetRunId']));
  });

  test('a workflow started before a server restart completes after it', async () => {
    const taskQueue = `cluster-durable-${process.pid}`;
    const runId = `it-cluster-${Date.now()}`;
    const nativeConnection = await NativeConnection.connect({ address });
    const worker = await Worker.create({
      connection: nativeConnection,
      taskQueue,
      workflowsPath: path.join(__dirname, '..', 'fixtures', 'workflows', 'durable.ts'),
      activities,
    });
    const running = worker.run();
    try {
      const handle = await client.workflow.start('durable', { taskQueue, workflowId: runId, args: [runId] });
      // The first activity is done and the workflow waits: its state is the server's to keep.
      for (let i = 0; ; i++) {
        const history = await handle.fetchHistory();
        if (history.events?.some((e) => e.activityTaskCompletedEventAttributes)) break;
        if (i > 120) throw new Error('the first activity did not complete in 60 s');
        await sleep(500);
      }
      const rowsBefore = Number(clusterSql(c, 'temporal', 'SELECT count(*) FROM executions'));
      expect(rowsBefore).toBeGreaterThanOrEqual(1);

      clusterCtl(c, 'stop');
      expect(() => clusterCtl(c, 'status')).toThrow();
      clusterCtl(c, 'start');

      // The client and the worker reconnect on their own; the signal reaches the same run.
      for (let i = 0; ; i++) {
        try {
          await handle.signal(finishSignal, 'after restart');
          break;
        } catch (err) {
          if (i > 60) throw err;
          await sleep(1000);
        }
      }
      const result = await handle.result();
      expect(result).toMatchObject({ note: 'after restart', workflowId: runId, before: { pid: process.pid }, after: { pid: process.pid } });
      // One run, not a new one started in its place.
      const described = await handle.describe();
      expect(described.status.name).toBe('COMPLETED');
      expect(described.runId).toBe(handle.firstExecutionRunId);

      // Visibility lives in PostgreSQL too, and filters on Ratchet's search attributes.
      for (let i = 0; ; i++) {
        const found = [];
        for await (const w of client.workflow.list({ query: `RatchetRunId = '${runId}' AND RatchetStep = 1` })) found.push(w.workflowId);
        if (found.length === 1) break;
        if (i > 30) throw new Error(`visibility query found ${found.length} workflows for ${runId}`);
        await sleep(1000);
      }
    } finally {
      worker.shutdown();
      await running;
      await nativeConnection.close();
    }
  }, 600_000);
});
