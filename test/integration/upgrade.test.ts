/**
 * Upgrading under a running run, on the real stack (issue 30; docs/upgrades.md): a tiny 3-step TrainRun
 * starts on build A (this repo's dist/workers/main.js); mid-run build B is deployed (its main worker,
 * test/fixtures/upgrade/mainWorkerB.js: today's workflows plus a timer that A never issues, a change NOT
 * behind patched()) and made current by `ratchet upgrade`; A is retired once the run has moved. The run
 * finishes; the steps before the boundary ran on A and the steps after it on B; no workflow task failed
 * with a non-determinism error; `ratchet upgrade --show` reports A drained; each execution's history
 * replays on its own build's code, and B's does not replay on A's (so versioning, not luck, kept them apart).
 *
 * Isolation: making a version current on task queue `ratchet` would starve every later test's unversioned
 * workers, so everything here (workers, client, CLI) runs in a namespace of its own on the stack's dev
 * server, with a deployment name of its own. Slow on 2 CPUs (minutes).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, promises as fs, readFileSync } from 'node:fs';
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
import { checkInvariants, distBuilt, killProc, startProc, takeOverStackWorkers, tinyConfig, workerCommands, type Proc } from './trainrunStack';

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

  test('a run started on A moves to B at a step boundary; A retires drained; no non-determinism; histories replay', async () => {
    const cmds = workerCommands(artifacts);
    const [, node, mainArgs, mainEnv] = cmds.main();
    const mainA = startProc('worker-main-a', node, [...mainArgs], { ...mainEnv, ...versioned(BUILD_A) }, dir);
    procs.push(mainA);
    for (const c of [cmds.rollout(), cmds.trainer()]) procs.push(startProc(c[0], c[1], [...c[2]], { ...c[3], ...isolated }, dir));
    await started(dir, mainA);
    // The very first versioned deploy needs `ratchet upgrade` too (docs/upgrades.md).
    expect(await ratchetUpgrade('--build-id', BUILD_A)).toContain(`${DEPLOYMENT}.${BUILD_A} is current`);

    const runId = `it-upgrade-${TS}`;
    const config = await tinyConfig(dir, { maxSteps: MAX_STEPS, asyncLevel: 0, rolloutsPerExample: ROLLOUTS_PER_STEP });
    const handle = await retrying('starting the run', () => startTrainRun(client, config, { runId, attachIfRunning: true }));
    const firstRunId = (await handle.describe()).runId; // build A's execution: the run continues as new only at the upgrade

    // Mid-run: deploy B (its main worker next to A's), and once step 0 is recorded make it current.
    const mainB = startProc('worker-main-b', node, [path.join(REPO, 'test', 'fixtures', 'upgrade', 'mainWorkerB.js')], { ...mainEnv, ...versioned(BUILD_B) }, dir);
    procs.push(mainB);
    const store = new LocalArtifactStore(artifacts);
    await until('step 0 to be recorded', async () => (await readStepRecords(store, runId)).length >= 1, 1_200_000, 1000);
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

    // Retiring A was safe: the server reports it drained (no pinned execution left). The stack's dev server rechecks every
    // 10 s (infra/temporal.sh); a server with the defaults takes 3 minutes or more, hence the long timeout.
    let show = '';
    await until(`${DEPLOYMENT}.${BUILD_A} drained in \`ratchet upgrade --show\``, async () => {
      show = await ratchetUpgrade('--show');
      return show.split('\n').some((l) => l.includes(`${DEPLOYMENT}.${BUILD_A} `) && l.includes('drained:'));
    }, 600_000, 15_000);
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
  }, 3_600_000);
});
