/**
 * One soak: a TrainRun on the real local stack while the seeded schedule injects
 * faults at chosen phases of chosen steps; afterwards the run invariants, no
 * sandbox and no stray worker left. Optionally a fault-free run of the same config
 * first, in the same soak, as the wall-time baseline.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import * as os from 'node:os';
import * as path from 'node:path';
import { WorkflowFailedError, type Client, type WorkflowHandle } from '@temporalio/client';
import { parse, stringify } from 'smol-toml';
import { connectClient } from '../cli/temporal';
import { progressQuery } from '../workflows/messages';
import type { TrainRun } from '../workflows/trainRun';
import type { Progress, RunStatus, TrainRunInput, TrainRunResult } from '../contracts';
import { DEFAULTS, paths, REPO_ROOT, TASK_QUEUES } from '../shared/paths';
import type { Logger } from '../shared/logger';
import { ARMS_TRAINER, SLOW_SAVE_STALL_S, healPort, injectFault, restartStackWorkers, restorePlainTrainer } from './faults';
import { releaseHistoriesDir, saveRunHistories } from './histories';
import { checkRun, fallbackViolations, leftoverSandboxes, strayWorkers, waitShownViolations } from './invariants';
import { LocalArtifactStore } from '../artifacts/store';
import { S3ArtifactStore } from '../artifacts/s3';
import { MinioAdmin } from './minioAdmin';
import { createSoakStore, startMinio, storeKeyEnv, swapAwsEnv, type SoakStore } from './storeKey';
import { comparePoints, faultDue, planFaults, REPLICA_LOSS, STEP_PHASES, type FaultKind, type PlannedFault, type RunPoint } from './schedule';

export const SOAK_CONFIG = path.join(REPO_ROOT, 'configs', 'swe-grep', 'soak.toml');

export interface SoakOptions {
  steps: number;
  faults: number;
  seed: number;
  hangS: number;
  /** Run the same config without faults first, for the wall-time ratio. */
  baseline: boolean;
  kinds?: readonly FaultKind[];
  /** How long a partition holds before it is healed (partition kinds only). */
  partitionS?: number;
  /** A second inference replica for the run, killed for good once mid-run (REPLICA_LOSS). */
  replicaLoss?: boolean;
  /** How long an incident (INCIDENT_KINDS) lasts before it is repaired. */
  incidentS?: number;
  /** How long the run may take to move on after one fault before the soak calls it stuck. */
  recoverTimeoutS?: number;
  logger: Logger;
}

export interface FaultOutcome extends PlannedFault {
  /** Where the run was when the fault hit; undefined if the run ended first. */
  hitAt?: RunPoint;
  /** Seconds from injection until the run moved past that point. */
  recoveryS?: number;
  /** The run's statuses from injection until it moved on (an incident's wait must show: waitShownViolations). */
  statuses?: RunStatus[];
  error?: string;
}

export interface SoakReport {
  runId: string;
  steps: number;
  seed: number;
  hangS: number;
  partitionS?: number;
  replicaLoss?: boolean;
  incidentS?: number;
  /** The run's store when it is not the local one: s3:// on MinIO, for store-credentials incidents. */
  storeUrl?: string;
  wallS: number;
  baselineWallS?: number;
  faults: FaultOutcome[];
  violations: string[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const POLL_MS = 150;

/** The second replica --replica-loss starts beside the stack's vLLM (infra/inference.sh with its own port and run dir). */
const REPLICA_PORT = 8001;
const replicaRunDir = (): string => `${paths.run()}-replica-1`;
function replicaEnv(): NodeJS.ProcessEnv {
  return { ...process.env, RATCHET_VLLM_PORT: String(REPLICA_PORT), RATCHET_RUN_DIR: replicaRunDir(), RATCHET_VLLM_LOG: path.join(paths.home(), 'logs', 'vllm-replica-1.log') };
}
async function replica(verb: 'start' | 'stop'): Promise<void> {
  await promisify(execFile)('bash', [path.join(REPO_ROOT, 'infra', 'inference.sh'), verb], { cwd: REPO_ROOT, env: replicaEnv(), timeout: 15 * 60_000 });
}

/** The soak config with this soak's step count: a copy in a temp dir, the committed file unchanged. */
export function configFor(steps: number, extraBaseUrls: string[] = [], opts: { trainerStallS?: number; artifacts?: SoakStore['artifacts'] } = {}): string {
  const doc = parse(readFileSync(SOAK_CONFIG, 'utf8')) as {
    orchestrator: Record<string, unknown>; inference: { base_urls: string[]; sync_quorum?: number }; liveness?: Record<string, unknown>; artifacts?: Record<string, unknown>;
  };
  doc.orchestrator.max_steps = steps;
  // A slow save must outlast the trainer's stall window to show that its progress beats keep it alive.
  if (opts.trainerStallS !== undefined) doc.liveness = { ...doc.liveness, trainer_stall_s: opts.trainerStallS };
  // Store credentials refused mid-run: the run's artifacts on the soak's MinIO (credentials never go in a config).
  if (opts.artifacts) doc.artifacts = { ...doc.artifacts, url: opts.artifacts.url, endpoint: opts.artifacts.endpoint };
  doc.inference.base_urls = [...doc.inference.base_urls, ...extraBaseUrls];
  // A replica lost for good: the weight sync must go on with the one left. The default quorum, a strict
  // majority, is 2 of 2, and the run would wait for inference until the replica came back (it never does).
  if (extraBaseUrls.length > 0) doc.inference.sync_quorum = 1;
  const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'ratchet-soak-')), 'soak.toml');
  writeFileSync(file, stringify(doc));
  return file;
}

function rolloutsPerStep(configPath: string): number {
  const o = (parse(readFileSync(configPath, 'utf8')) as { orchestrator: { batch_size: number; rollouts_per_example: number } }).orchestrator;
  return o.batch_size * o.rollouts_per_example;
}

/** The run's progress, or undefined while the server or the main worker is away. */
async function pointOf(handle: WorkflowHandle<typeof TrainRun>): Promise<Progress | undefined> {
  try {
    return await handle.query(progressQuery);
  } catch {
    return undefined;
  }
}

/** The run's result, riding out moments with no server. */
async function resultOf(handle: WorkflowHandle<typeof TrainRun>): Promise<TrainRunResult> {
  for (;;) {
    try {
      return await handle.result();
    } catch (err) {
      if (err instanceof WorkflowFailedError) throw err;
      await sleep(2000);
    }
  }
}

async function startRun(client: Client, configPath: string, label: string): Promise<{ runId: string; handle: WorkflowHandle<typeof TrainRun> }> {
  const runId = `soak-${label}-${Date.now().toString(36)}`;
  // A dead trainer is noticed in 30 s instead of the CPU defaults' minutes, as in the fault tests.
  const input: TrainRunInput = { configPath, runId, trainerTimeouts: { scheduleToStart: '30 seconds', heartbeat: '30 seconds' } };
  const handle = await client.workflow.start<typeof TrainRun>('TrainRun', { taskQueue: TASK_QUEUES.main, workflowId: runId, args: [input] });
  return { runId, handle };
}

/**
 * Drives the schedule against the live run, fault after fault: each is due from its
 * planned step on, and hits the first time the run is in its phase (a short phase that
 * went by unseen is caught at a later step). Then it waits for the run to move on.
 */
async function driveFaults(handle: WorkflowHandle<typeof TrainRun>, plan: PlannedFault[], opts: SoakOptions, store?: SoakStore): Promise<FaultOutcome[]> {
  const outcomes: FaultOutcome[] = [];
  const markers = mkdtempSync(path.join(os.tmpdir(), 'ratchet-soak-markers-'));
  let finished = false;
  void handle.result().then(() => { finished = true; }, () => { finished = true; });
  for (const planned of plan) {
    const f: FaultOutcome = { ...planned };
    outcomes.push(f);
    let p: Progress | undefined;
    for (;;) {
      if (finished) break;
      p = await pointOf(handle);
      if (p && faultDue(p, f)) break;
      await sleep(POLL_MS);
    }
    if (finished || !p) {
      f.error = 'the run ended before the fault\'s phase came round';
      opts.logger.warn({ fault: f }, 'fault not injected');
      continue;
    }
    f.step = p.step;
    f.hitAt = { step: p.step, phase: p.phase, rolloutsDone: p.rolloutsDone };
    const t0 = Date.now();
    // What the run says while the fault lasts (an injection can take --incident-s): polled beside it.
    const statuses = new Set<RunStatus>();
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const now = await pointOf(handle);
        if (now) statuses.add(now.status);
        await sleep(1000);
      }
    })();
    try {
      try {
        await injectFault(f.kind, {
          hangMs: opts.hangS * 1000, partitionMs: (opts.partitionS ?? 60) * 1000, replicaPidFile: path.join(replicaRunDir(), 'vllm.pid'), restartDelayMs: 3000,
          incidentMs: (opts.incidentS ?? 60) * 1000, runId: handle.workflowId, markerFile: path.join(markers, `fault-${f.index}`), store, logger: opts.logger,
        });
      } catch (err) {
        f.error = `injection failed: ${(err as Error).message}`;
        opts.logger.warn({ fault: f }, 'fault not injected');
        continue;
      }
      const deadline = t0 + (opts.recoverTimeoutS ?? 900) * 1000;
      for (;;) {
        const now = await pointOf(handle);
        if (now) statuses.add(now.status);
        if (finished || (now && comparePoints({ step: now.step, phase: now.phase, rolloutsDone: now.rolloutsDone }, f.hitAt) > 0)) {
          f.recoveryS = (Date.now() - t0) / 1000;
          break;
        }
        if (Date.now() > deadline) {
          f.error = `the run did not move past ${JSON.stringify(f.hitAt)} within ${opts.recoverTimeoutS ?? 900} s`;
          break;
        }
        await sleep(POLL_MS);
      }
    } finally {
      watching = false;
      await watcher;
      f.statuses = [...statuses];
    }
    opts.logger.info({ fault: f }, 'fault done');
  }
  return outcomes;
}

/** The seeded schedule, and with --replica-loss one replica lost for good a third of the way in, during rollouts. */
export function soakPlan(opts: Pick<SoakOptions, 'seed' | 'faults' | 'steps' | 'kinds' | 'replicaLoss'>): PlannedFault[] {
  const plan: Omit<PlannedFault, 'index'>[] = planFaults({ seed: opts.seed, faults: opts.faults, steps: opts.steps, kinds: opts.kinds });
  if (opts.replicaLoss) plan.push({ kind: REPLICA_LOSS, step: Math.floor((opts.steps - 1) / 3), phase: 'rollouts' });
  return plan
    .sort((a, b) => a.step - b.step || STEP_PHASES.indexOf(a.phase) - STEP_PHASES.indexOf(b.phase))
    .map((f, index) => ({ ...f, index }));
}

/** A soak its user must set up differently (a flag, the stack not up): printed as its message, without a stack trace. */
export class SoakUsageError extends Error {}

const PARTITIONED_PORTS = [8000, 7233];

/**
 * A soak with store-credentials incidents: MinIO started, the soak's MinIO user made, and every worker of
 * the stack (and its supervisor, whose restarts inherit its environment) started again on that user's key.
 * Returns the store and the function that puts the stack back on the environment it had.
 */
async function storeUp(logger: Logger): Promise<{ store: SoakStore; restore: () => Promise<void> }> {
  await startMinio();
  const store = await createSoakStore(`soak-${Date.now().toString(36)}`);
  const putBack = swapAwsEnv(storeKeyEnv(store));
  const restore = async () => {
    putBack();
    await restartStackWorkers();
    await new MinioAdmin(store.admin).removeUser(store.accessKey);
  };
  try {
    logger.info({ url: store.artifacts.url, user: store.accessKey }, 'the run goes to MinIO; restarting the stack\'s workers on the soak\'s MinIO user');
    await restartStackWorkers();
  } catch (err) {
    await restore().catch(() => undefined);
    throw err;
  }
  return { store, restore };
}

export async function runSoak(opts: SoakOptions): Promise<SoakReport> {
  const plan = soakPlan(opts);
  // A soak killed mid-partition leaves its iptables rule: whatever is left, this soak starts healed.
  for (const port of PARTITIONED_PORTS) await healPort(port).catch(() => undefined);
  // The soak faults the stack's own processes: without the stack up, say so before restarting any worker.
  const { client, close } = await connectClient().catch((err: unknown) => {
    throw new SoakUsageError(`soak: the soak faults the local stack's processes, so the stack must be up (bin/ratchet up): ${(err as Error).message}`);
  });
  const onStore = plan.some((f) => f.kind === 'store-credentials') ? await storeUp(opts.logger).catch(async (err: unknown) => {
    await close();
    throw err;
  }) : undefined;
  const store = onStore?.store;
  const configPath = configFor(opts.steps, opts.replicaLoss ? [`http://127.0.0.1:${REPLICA_PORT}/v1`] : [], {
    ...(plan.some((f) => f.kind === 'slow-save') ? { trainerStallS: SLOW_SAVE_STALL_S } : {}), artifacts: store?.artifacts,
  });
  // The run's records and artifacts, read back by the invariants with the key the workers use.
  const runStore = store ? new S3ArtifactStore(store.artifacts) : new LocalArtifactStore(paths.artifacts());
  try {
    if (opts.replicaLoss) {
      opts.logger.info({ port: REPLICA_PORT }, 'starting a second inference replica');
      await replica('start');
    }
    let baselineWallS: number | undefined;
    if (opts.baseline) {
      const t0 = Date.now();
      const { runId, handle } = await startRun(client, configPath, 'baseline');
      opts.logger.info({ runId, steps: opts.steps }, 'fault-free baseline run');
      await resultOf(handle);
      baselineWallS = (Date.now() - t0) / 1000;
    }

    const t0 = Date.now();
    const { runId, handle } = await startRun(client, configPath, `s${opts.seed}`);
    opts.logger.info({ runId, steps: opts.steps, faults: plan.length }, 'soak run with faults');
    const faults = await driveFaults(handle, plan, opts, store);
    const violations: string[] = [];
    let result: TrainRunResult | undefined;
    try {
      result = await resultOf(handle);
    } catch (err) {
      violations.push(`the run failed: ${(err as Error).message}`);
    }
    const wallS = (Date.now() - t0) / 1000;
    if (result && (result.stopped !== 'completed' || result.stepsCompleted !== opts.steps)) {
      violations.push(`the run ended ${result.stopped} after ${result.stepsCompleted} of ${opts.steps} steps`);
    }
    if (result) {
      const checked = await checkRun({
        runId, artifactsRoot: paths.artifacts(), maxSteps: opts.steps, rolloutsPerStep: rolloutsPerStep(configPath), inferenceUrl: DEFAULTS.inferenceUrl, store: runStore,
      });
      violations.push(...checked.violations);
      // The soak corrupts no checkpoint: a fallback it finds was committed by a transient error.
      violations.push(...fallbackViolations(checked.fallbacks));
    }
    violations.push(...waitShownViolations(faults));
    // The janitor sweeps on its own schedule: give it a minute before calling a sandbox left over.
    let left: string[] = [];
    for (let i = 0; i < 30 && (left = await leftoverSandboxes(runId)).length > 0; i++) await sleep(2000);
    violations.push(...left.map((n) => `sandbox left over: ${n}`));
    violations.push(...(await strayWorkers()));
    for (const f of faults) if (f.error) violations.push(`fault ${f.index} (${f.kind} at step ${f.step} ${f.phase}): ${f.error}`);
    // A real run through real faults: its history is what the replay test should hold.
    const prefix = `real-soak-${opts.steps}-steps-${opts.faults}-faults-seed-${opts.seed}`;
    await saveRunHistories(client, runId, path.join(paths.home(), 'test-reports', 'soak-histories'), prefix);
    if (process.env.RATCHET_RECORD_HISTORIES === '1') await saveRunHistories(client, runId, releaseHistoriesDir(), prefix);
    return {
      runId, steps: opts.steps, seed: opts.seed, hangS: opts.hangS, partitionS: opts.partitionS, replicaLoss: opts.replicaLoss, incidentS: opts.incidentS,
      storeUrl: store?.artifacts.url, wallS, baselineWallS, faults, violations,
    };
  } finally {
    if (onStore) {
      // Every worker started again without the soak's key (so an armed trainer is replaced too), then the key removed.
      await onStore.restore().catch((err: unknown) => opts.logger.error({ err: String(err) }, 'could not put the stack\'s workers back on their own environment: restart them (bin/ratchet down/up)'));
    } else if (plan.some((f) => ARMS_TRAINER.includes(f.kind))) {
      await restorePlainTrainer().catch((err: unknown) => opts.logger.error({ err: String(err) }, 'could not restart the stack\'s trainer without the soak\'s injected faults: restart it (bin/ratchet down/up)'));
    }
    for (const port of PARTITIONED_PORTS) await healPort(port).catch(() => undefined);
    if (opts.replicaLoss) await replica('stop').catch(() => undefined);
    await close();
  }
}

/** p-th percentile (nearest rank) of xs; NaN for none. */
export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}
