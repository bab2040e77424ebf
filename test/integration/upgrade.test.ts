/**
 * Upgrading under a running run, on the real stack (issue 30; docs/upgrades.md): a tiny 3-step TrainRun
 * starts on build A (this repo's dist/workers/main.js); mid-run build B is deployed (its main worker,
 * test/fixtures/upgrade/mainWorkerB.js: today's workflows plus a timer that A never issues, a change NOT
 * behind patched()) and made current by `ratchet upgrade`; A is retired once the run has moved. The run
 * finishes; the steps before the boundary ran on A and the steps after it on B; no workflow task failed
 * with a non-determinism error; `ratchet upgrade --show` reports A drained; each execution's history
 * replays on its own build's code, and B's does not replay on A's (so versioning, not luck, kept them apart).
 * Then `ratchet gc` on the finished run deletes what its dry run lists, and its last step still replays (with
 * build B's code, which trained it: build A's trainer refuses B's trainer_config, in a replay as in a run).
 *
 * Build B also adds settings (issue 42): a key in [sampling] and one in [trainer]. It is a real build, a copy
 * of this tree with those keys added to its TypeScript schema and its trainer's (buildB below). B's rollout
 * worker and trainer join mid-run while A's rollout worker and A's trainer keep polling to the end; the run
 * holds A's trainer when it moves to B, so that trainer meets B's trainer_config and must hand the run back.
 * The run completes, each step once, with no non-retryable failure (ConfigError, InvalidRolloutTask/Input);
 * every rollout of an execution on B ran on B's rollout worker (Worker Versioning), each of A's on A's.
 *
 * Isolation: making a version current on task queue `ratchet` would starve every later test's unversioned
 * workers, so everything here (workers, client, CLI) runs in a namespace of its own on the stack's dev
 * server, with a deployment name of its own. Slow on 2 CPUs (minutes).
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, promises as fs, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import { describeWithStack, REPO, TEMPORAL_BIN } from '../helpers/stack';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { describeDeployment } from '../../src/deploy/upgrade';
import { readStepRecords } from '../../src/records/runRecords';
import { startTrainRun } from '../../src/workflows/client';
import { SA } from '../../src/workflows/messages';
import { checkInvariants, distBuilt, killProc, startProc, takeOverStackWorkers, tinyConfig, workerCommands, type Proc } from '../helpers/trainrunStack';

const run = promisify(execFile);
const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const ADDRESS = '127.0.0.1:7233';
const TS = Date.now();
const NAMESPACE = `ratchet-it-upgrade-${TS}`;
const DEPLOYMENT = `ratchet-it-upgrade-${TS}`;
const BUILD_A = `it-a-${TS}`;
const BUILD_B = `it-b-${TS}`;
const MAX_STEPS = 3;
const ROLLOUTS_PER_STEP = 2;
const NON_DETERMINISTIC = temporal.api.enums.v1.WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR;

/** The search attributes `ratchet up` registers (infra/temporal.sh), read from there so the two cannot drift. */
function stackSearchAttributes(): [string, string][] {
  const line = /^SEARCH_ATTRIBUTES="([^"]+)"/m.exec(readFileSync(path.join(REPO, 'infra', 'temporal.sh'), 'utf8'));
  if (!line) throw new Error('infra/temporal.sh has no SEARCH_ATTRIBUTES="..." line');
  const pairs = line[1]!.trim().split(/\s+/).map((p) => p.split(':') as [string, string]);
  for (const key of Object.values(SA)) {
    if (!pairs.some(([n]) => n === key.name)) throw new Error(`infra/temporal.sh does not register ${key.name} (src/workflows/messages.ts SA)`);
  }
  return pairs;
}

/** Failure types that fail a step or a run outright: a version skew must never produce one. */
const FATAL_TYPES = ['ConfigError', 'InvalidRolloutTask', 'InvalidRolloutInput'];

/** `text` with `find` replaced by `find` + `add`; throws when `find` is not there (the tree changed: fix the anchor). */
function addAfter(file: string, find: string, add: string): void {
  const text = readFileSync(file, 'utf8');
  if (!text.includes(find)) throw new Error(`build B: ${file} has no "${find}" to add a setting after; update the anchor in upgrade.test.ts`);
  writeFileSync(file, text.replace(find, find + add));
}

/**
 * Build B: this tree's code (src, dist, build B's workflow fixture, the trainer package) copied to `root`,
 * everything else linked, with two settings added as a release would add them: [sampling] upgrade_probe and
 * [trainer] upgrade_probe, defaults 0, in the TypeScript schema (source and built) and the trainer's dataclass.
 */
function buildB(root: string): void {
  for (const e of readdirSync(REPO)) {
    if (['.git', 'src', 'dist', 'test', 'trainer'].includes(e)) continue;
    symlinkSync(path.join(REPO, e), path.join(root, e));
  }
  for (const d of ['src', 'dist', path.join('test', 'fixtures', 'upgrade'), path.join('trainer', 'ratchet_trainer')]) {
    cpSync(path.join(REPO, d), path.join(root, d), { recursive: true });
  }
  for (const [file, z] of [['src/config/schema.ts', 'z'], ['dist/config/schema.js', 'zod_1.z']] as const) {
    addAfter(path.join(root, file), `history: ${z}.enum(['tokens', 'template']).default('tokens'),`, `\n  upgrade_probe: ${z}.number().default(0),`);
    addAfter(path.join(root, file), `parallelism: ${z}.enum(['auto', 'replicate', 'fsdp']).default('auto'),`, `\n  upgrade_probe: ${z}.number().default(0),`);
  }
  addAfter(path.join(root, 'trainer', 'ratchet_trainer', 'core', 'config.py'), 'parallelism: str = "auto"', '\n    upgrade_probe: float = 0.0');
}

const temporalCli = (...args: string[]) => run(TEMPORAL_BIN, [...args, '--address', ADDRESS], { encoding: 'utf8' });

/** Retries `fn` while the new namespace is not yet visible to every service (the dev server caches namespaces for seconds). */
async function retrying<T>(what: string, fn: () => Promise<T>, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`${what}: ${(err as Error).message}`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs: number, everyMs = 2000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** A worker has connected and created its Temporal worker (its pino "main worker started" line). */
async function started(dir: string, p: Proc): Promise<void> {
  await until(`${p.name} to start (log: ${path.join(dir, `${p.name}.log`)})`, async () => {
    if (p.child.exitCode !== null) throw new Error(`${p.name} exited with ${p.child.exitCode}; see ${path.join(dir, `${p.name}.log`)}`);
    return (await fs.readFile(path.join(dir, `${p.name}.log`), 'utf8').catch(() => '')).includes('main worker started');
  }, 180_000, 500);
}

describeWithStack('upgrade under a running run on the real stack (Worker Versioning)', ['temporalBinary', 'temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-upgrade-'));
  const artifacts = path.join(dir, 'artifacts');
  const procs: Proc[] = [];
  let connection: Connection | undefined;
  let client: Client;
  let restoreStackWorkers: () => Promise<void> = async () => {};
  let namespaceCreated = false;
  // Every process of this test: its own namespace, its own artifact root; metrics ports free for two main workers.
  const isolated = { TEMPORAL_NAMESPACE: NAMESPACE, TEMPORAL_ADDRESS: ADDRESS };
  const versioned = (buildId: string) => ({
    ...isolated, RATCHET_WORKER_VERSIONING: 'on', RATCHET_DEPLOYMENT_NAME: DEPLOYMENT, RATCHET_BUILD_ID: buildId,
    RATCHET_METRICS_PORT: '0', RATCHET_SDK_METRICS_PORT: 'off',
  });
  /** `ratchet upgrade ...` as users run it, in this test's namespace. */
  const ratchetUpgrade = async (...args: string[]) => (await run(process.execPath, [path.join(REPO, 'dist', 'cli', 'index.js'), 'upgrade', '--deployment', DEPLOYMENT, ...args], {
    cwd: REPO, encoding: 'utf8', env: { ...process.env, ...isolated, NO_COLOR: '1' },
  })).stdout;

  beforeAll(async () => {
    if (!distBuilt()) throw new Error(`dist/workers is missing: run npm run build first (in ${REPO})`);
    await temporalCli('operator', 'namespace', 'create', '--namespace', NAMESPACE, '--retention', '24h');
    namespaceCreated = true;
    for (const [name, type] of stackSearchAttributes()) {
      await retrying(`registering search attribute ${name} in ${NAMESPACE}`, () => temporalCli('operator', 'search-attribute', 'create', '--namespace', NAMESPACE, '--name', name, '--type', type));
    }
    connection = await Connection.connect({ address: ADDRESS });
    client = new Client({ connection, namespace: NAMESPACE });
    await retrying(`namespace ${NAMESPACE} to serve requests`, () => client.workflow.count());
    // The rollout worker's janitor would sweep the stack's sandboxes (their leases live in the stack's artifact root).
    restoreStackWorkers = await takeOverStackWorkers();
  }, 300_000);

  afterAll(async () => {
    for (const p of procs) await killProc(p, 'SIGTERM');
    await connection?.close();
    await restoreStackWorkers();
    if (namespaceCreated) {
      await temporalCli('operator', 'namespace', 'delete', '--namespace', NAMESPACE, '--yes')
        .catch((err: Error) => console.warn(`could not delete test namespace ${NAMESPACE} (isolated; harmless): ${err.message}`));
    }
  });

  test('a run started on A moves to B (which adds settings) at a step boundary; old rollout worker and trainer keep polling; A retires drained; no non-determinism; histories replay', async () => {
    const cmds = workerCommands(artifacts);
    const [, node, mainArgs, mainEnv] = cmds.main();
    const mainA = startProc('worker-main-a', node, [...mainArgs], { ...mainEnv, ...versioned(BUILD_A) }, dir);
    procs.push(mainA);
    const [rolloutName, , rolloutArgs, rolloutEnv] = cmds.rollout();
    const rolloutA = startProc(`${rolloutName}-a`, node, [...rolloutArgs], { ...rolloutEnv, ...versioned(BUILD_A) }, dir);
    const [trainerName, python, trainerArgs, trainerEnv] = cmds.trainer();
    const trainerA = startProc(`${trainerName}-a`, python, [...trainerArgs], { ...trainerEnv, ...isolated }, dir);
    procs.push(rolloutA, trainerA);
    const b = path.join(dir, 'build-b');
    await fs.mkdir(b);
    buildB(b);
    await started(dir, mainA);
    // The very first versioned deploy needs `ratchet upgrade` too (docs/upgrades.md).
    expect(await ratchetUpgrade('--build-id', BUILD_A)).toContain(`${DEPLOYMENT}.${BUILD_A} is current`);

    const runId = `it-upgrade-${TS}`;
    const config = await tinyConfig(dir, { maxSteps: MAX_STEPS, asyncLevel: 0, rolloutsPerExample: ROLLOUTS_PER_STEP });
    const handle = await retrying('starting the run', () => startTrainRun(client, config, { runId, attachIfRunning: true }));
    const firstRunId = (await handle.describe()).runId; // build A's execution: the run continues as new only at the upgrade

    // Mid-run: deploy B (its main worker next to A's), and once step 0 is recorded make it current.
    const mainB = startProc('worker-main-b', node, [path.join(b, 'test', 'fixtures', 'upgrade', 'mainWorkerB.js')], { ...mainEnv, ...versioned(BUILD_B) }, dir, b);
    const rolloutB = startProc(`${rolloutName}-b`, node, [path.join(b, 'dist', 'workers', 'rollout.js')], { ...rolloutEnv, ...versioned(BUILD_B) }, dir, b);
    procs.push(mainB, rolloutB);
    const store = new LocalArtifactStore(artifacts);
    await until('step 0 to be recorded', async () => (await readStepRecords(store, runId)).length >= 1, 1_200_000, 1000);
    // B's trainer only now: the run holds A's trainer (leased for step 0) when it moves to B.
    const trainerB = startProc(`${trainerName}-b`, python, [...trainerArgs, '--metrics-port', 'off'], { ...trainerEnv, PYTHONPATH: path.join(b, 'trainer'), ...isolated }, dir, b);
    procs.push(trainerB);
    await started(dir, mainB);
    expect(await ratchetUpgrade('--build-id', BUILD_B)).toContain(`${DEPLOYMENT}.${BUILD_B} is current`);
    expect((await describeDeployment(client, DEPLOYMENT)).current).toBe(`${DEPLOYMENT}.${BUILD_B}`);

    // Retire A once the run has moved off it: a step recorded on B, and no open execution pinned to A.
    await until('a step recorded on build B', async () => (await readStepRecords(store, runId)).some((r) => r.build?.build_id === BUILD_B), 1_200_000);
    for await (const w of client.workflow.list({ query: 'ExecutionStatus = "Running"' })) {
      const info = (await client.workflow.getHandle(w.workflowId, w.runId).describe()).raw.workflowExecutionInfo;
      expect([w.workflowId, info?.versioningInfo?.deploymentVersion?.buildId]).not.toEqual([w.workflowId, BUILD_A]);
    }
    await killProc(mainA, 'SIGTERM');

    const result = await handle.result();
    expect(result).toMatchObject({ stepsCompleted: MAX_STEPS, policyVersion: MAX_STEPS, stopped: 'completed' });
    const records = await checkInvariants({ artifacts, runId, maxSteps: MAX_STEPS, rolloutsPerStep: ROLLOUTS_PER_STEP, inferenceUrl: INFERENCE });

    // Steps 0..k on A, k+1.. on B: one boundary, at a step boundary, at least one step on each.
    const builds = records.map((r) => r.build?.build_id);
    const firstB = builds.indexOf(BUILD_B);
    expect(firstB).toBeGreaterThan(0);
    expect(builds).toEqual([...Array(firstB).fill(BUILD_A), ...Array(MAX_STEPS - firstB).fill(BUILD_B)]);
    for (const r of records) expect(r.build?.deployment).toBe(DEPLOYMENT);
    // Each step's rollout child ran on its parent's build.
    for (const r of records) {
      const child = await client.workflow.getHandle(`${runId}-step-${r.step}-rollouts`).describe();
      expect([r.step, child.raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion?.buildId]).toEqual([r.step, r.build?.build_id]);
    }

    // The chain: A's execution, continued as new once, onto B. No workflow task in the namespace failed on non-determinism.
    const chain: string[] = [];
    for await (const w of client.workflow.list({ query: `WorkflowId = '${runId}'` })) chain.push(w.runId);
    expect(chain).toHaveLength(2);
    expect(chain).toContain(firstRunId);
    const nondeterministic: string[] = [];
    for await (const w of client.workflow.list()) {
      for (const e of (await client.workflow.getHandle(w.workflowId, w.runId).fetchHistory()).events ?? []) {
        const f = e.workflowTaskFailedEventAttributes;
        if (f && (f.cause === NON_DETERMINISTIC || /nondetermin/i.test(f.failure?.message ?? ''))) {
          nondeterministic.push(`${w.workflowId}/${w.runId}: ${f.failure?.message}`);
        }
      }
    }
    expect(nondeterministic).toEqual([]);

    // Version skew (issue 42): B's settings never failed anything. A's trainer met B's trainer_config (the run still
    // held it) and handed the run back; B's trainer took it. Every rollout ran on its own build's rollout worker.
    const fatal: string[] = [];
    const rolloutRan = new Map<string, Set<string>>(); // build id -> identities of the workers that ran its rollouts
    for await (const w of client.workflow.list()) {
      const h = client.workflow.getHandle(w.workflowId, w.runId);
      const build = (await h.describe()).raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion?.buildId ?? 'unversioned';
      const scheduled = new Map<string, string>(); // scheduled event id -> activity type, for rollout activities
      for (const e of (await h.fetchHistory()).events ?? []) {
        const type = e.activityTaskScheduledEventAttributes?.activityType?.name;
        if (type === 'rollout' || type === 'rolloutChunk') scheduled.set(String(e.eventId), type);
        const startedRollout = e.activityTaskStartedEventAttributes;
        if (startedRollout && scheduled.has(String(startedRollout.scheduledEventId))) {
          rolloutRan.set(build, (rolloutRan.get(build) ?? new Set()).add(startedRollout.identity ?? '?'));
        }
        const failure = e.activityTaskFailedEventAttributes?.failure ?? e.workflowExecutionFailedEventAttributes?.failure;
        const failureType = failure?.applicationFailureInfo?.type ?? failure?.cause?.applicationFailureInfo?.type;
        if (failureType && FATAL_TYPES.includes(failureType)) fatal.push(`${w.workflowId}: ${failureType}: ${failure?.message}`);
      }
    }
    expect(fatal).toEqual([]);
    const idOf = (p: Proc) => `${p.child.pid}@${os.hostname()}`;
    expect([...rolloutRan.get(BUILD_A) ?? []]).toEqual([idOf(rolloutA)]);
    expect([...rolloutRan.get(BUILD_B) ?? []]).toEqual([idOf(rolloutB)]);
    const trainerLog = async (p: Proc) => fs.readFile(path.join(dir, `${p.name}.log`), 'utf8');
    expect(await trainerLog(trainerA)).toContain('handing the run to a newer trainer');
    expect(await trainerLog(trainerB)).toMatch(new RegExp(`trainer leased.*${runId}`));

    // Retiring A was safe: the server reports it drained (no pinned execution left). The stack's dev server rechecks every
    // 10 s (infra/temporal.sh); a server with the defaults takes 3 minutes or more, hence the long timeout. Asked every
    // 5 s: at every 15 s the answer came up to 15 s after the drain (each ask is one CLI start, ~1 s of CPU).
    let show = '';
    await until(`${DEPLOYMENT}.${BUILD_A} drained in \`ratchet upgrade --show\``, async () => {
      show = await ratchetUpgrade('--show');
      return show.split('\n').some((l) => l.includes(`${DEPLOYMENT}.${BUILD_A} `) && l.includes('drained:'));
    }, 600_000, 5_000);
    expect(show).toContain(`current ${DEPLOYMENT}.${BUILD_B}`);

    // Each build replays what it wrote; B's history on A's code does not: the change was real, versioning kept them apart.
    const secondRunId = chain.find((id) => id !== firstRunId)!;
    const historyA = await client.workflow.getHandle(runId, firstRunId).fetchHistory();
    const historyB = await client.workflow.getHandle(runId, secondRunId).fetchHistory();
    const codeA = { workflowsPath: require.resolve('../../src/workflows') };
    const codeB = { workflowsPath: require.resolve('../fixtures/upgrade/workflowsB') };
    await Worker.runReplayHistory(codeA, historyA, runId);
    await Worker.runReplayHistory(codeB, historyB, runId);
    const crossed = await Worker.runReplayHistory(codeA, historyB, runId).then(() => undefined, (err: unknown) => err as Error);
    expect(crossed?.name).toBe('DeterminismViolationError');

    // Retention (issue 42), on this finished run: `ratchet gc` deletes exactly what its dry run lists (step 0's
    // checkpoint with keep_last 2, every turn journal), and the run still replays its last step and reports.
    const cli = (...args: string[]) => run(process.execPath, [path.join(REPO, 'dist', 'cli', 'index.js'), ...args], {
      cwd: REPO, encoding: 'utf8', env: { ...process.env, ...isolated, RATCHET_ARTIFACTS: artifacts, NO_COLOR: '1' },
    });
    const runDir = path.join(artifacts, 'runs', runId);
    const files = async () => {
      const out = new Set<string>();
      for (const rel of await fs.readdir(runDir, { recursive: true })) {
        if ((await fs.stat(path.join(runDir, rel))).isFile()) out.add(path.posix.join('runs', runId, rel));
      }
      return out;
    };
    const before = await files();
    const dry = JSON.parse((await cli('gc', runId, '--dry-run', '--keep-last', '2', '--json')).stdout) as { delete: { key: string }[]; checkpoints: { step: number; keep: string }[] };
    expect(dry.checkpoints.filter((ck) => ck.keep !== 'whole').map((ck) => ck.step)).toEqual([0]);
    expect(await files()).toEqual(before); // a dry run deletes nothing
    await cli('gc', runId, '--keep-last', '2');
    const after = await files();
    expect([...before].filter((f) => !after.has(f)).sort()).toEqual(dry.delete.map((d) => d.key).sort());
    expect([...after].filter((f) => !before.has(f)).map((f) => path.dirname(f))).toEqual([`runs/${runId}/records/retention`]);
    // The last step trained on build B (its trainer_state.json has B's key): replayed with B's code, as a step must be.
    await run(process.execPath, [path.join(b, 'dist', 'cli', 'index.js'), 'replay-step', runId, String(MAX_STEPS - 1)], {
      cwd: b, encoding: 'utf8', env: { ...process.env, ...isolated, RATCHET_ARTIFACTS: artifacts, NO_COLOR: '1' },
    });
    const report = path.join(dir, 'report.html');
    await cli('report', runId, '--out', report);
    expect((await fs.stat(report)).size).toBeGreaterThan(1000);
  }, 3_600_000);
});
