/**
 * Starting and following a TrainRun from outside Temporal (the CLI, tests,
 * benchmarks). Not workflow code: it never goes into the workflow bundle.
 */
import { WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy, type Client, type WorkflowHandle, type WorkflowStartOptions } from '@temporalio/client';
import { SA, progressQuery } from './messages';
import type { Progress, TrainRunInput, TrainRunResult } from '../contracts/run';
import type { TrainRun } from './trainRun';
import { trainingPriority } from '../shared/fairness';

export interface StartTrainRunOptions {
  /** Run id = workflow id. Default: `<config name or file stem>-<UTC timestamp>`. */
  runId?: string;
  taskQueue?: string;
  continueAsNewEvery?: number;
  /** Attach to the running workflow when the run id is already running instead of failing. */
  attachIfRunning?: boolean;
}

export function defaultRunId(configPath: string, now: Date = new Date()): string {
  const stem = configPath.replace(/\\/g, '/').split('/').slice(-2).join('-').replace(/\.toml$/, '');
  const stamp = now.toISOString().replace(/[-:]/g, '').replace(/\..*$/, '');
  return `${stem.replace(/[^A-Za-z0-9._-]/g, '-')}-${stamp}`;
}

export async function startTrainRun(client: Client, configPath: string, opts: StartTrainRunOptions = {}): Promise<WorkflowHandle<typeof TrainRun>> {
  const runId = opts.runId ?? defaultRunId(configPath);
  const input: TrainRunInput = { configPath, runId, continueAsNewEvery: opts.continueAsNewEvery };
  try {
    return await client.workflow.start<typeof TrainRun>('TrainRun', {
      taskQueue: opts.taskQueue ?? 'ratchet',
      workflowId: runId,
      args: [input],
      // The run's keys (the config's weight is read inside the workflow; its activities carry it).
      priority: trainingPriority(runId),
      typedSearchAttributes: [{ key: SA.status, value: 'starting' }, { key: SA.step, value: 0 }],
    });
  } catch (err) {
    if (opts.attachIfRunning && err instanceof WorkflowExecutionAlreadyStartedError) {
      return client.workflow.getHandle<typeof TrainRun>(runId);
    }
    throw err;
  }
}

/**
 * Starts a workflow under its id, or hands back the execution already under that id, running or
 * closed (a closed one's `result()` is its recorded outcome). For callers that may be restarted and
 * call again with the same ids (a resumed bench): nothing is started twice, nothing finished reruns.
 */
export async function startOrAttach(client: Client, workflowType: string, opts: WorkflowStartOptions & { workflowId: string }): Promise<WorkflowHandle> {
  try {
    return await client.workflow.start(workflowType, { ...opts, workflowIdReusePolicy: WorkflowIdReusePolicy.REJECT_DUPLICATE });
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) return client.workflow.getHandle(opts.workflowId);
    throw err;
  }
}

export function webUiUrl(workflowId: string, uiBase = process.env.RATCHET_TEMPORAL_UI ?? 'http://127.0.0.1:8233', namespace = 'default'): string {
  return `${uiBase}/namespaces/${namespace}/workflows/${encodeURIComponent(workflowId)}`;
}

export function formatStepLine(p: Progress): string {
  const s = p.lastStep!;
  const comps = Object.entries(s.components).map(([k, v]) => `${k}=${v.toFixed(3)}`).join(' ');
  return `step ${s.step + 1}/${p.maxSteps}  reward ${s.meanReward.toFixed(3)}  policy v${s.policyVersion}  rollouts ${s.rollouts}` +
    `${s.dropped ? ` (dropped ${s.dropped})` : ''}${comps ? `  ${comps}` : ''}`;
}

/**
 * Follows a run until it ends: polls the `progress` query and calls onLine for
 * each newly completed step and each status change. Queries survive
 * continue-as-new (the handle follows the chain) and a worker restart.
 */
export async function followRun(
  handle: WorkflowHandle<typeof TrainRun>,
  onLine: (line: string) => void,
  opts: { pollMs?: number } = {},
): Promise<TrainRunResult> {
  const pollMs = opts.pollMs ?? 2000;
  let lastStepSeen = -1;
  let lastStatus = '';
  let result: TrainRunResult | undefined;
  let failure: unknown;
  const done = handle.result().then((r) => { result = r; }, (err: unknown) => { failure = err; });
  while (result === undefined && failure === undefined) {
    try {
      const p = await handle.query(progressQuery);
      if (p.lastStep && p.lastStep.step > lastStepSeen) {
        lastStepSeen = p.lastStep.step;
        onLine(formatStepLine(p));
      }
      if (p.status !== lastStatus) {
        lastStatus = p.status;
        if (p.status !== 'running') onLine(`status: ${p.status} (step ${p.step}/${p.maxSteps}, phase ${p.phase})`);
      }
    } catch {
      // No worker to answer yet (starting, or restarting): keep waiting for the result.
    }
    await Promise.race([done, new Promise((r) => setTimeout(r, pollMs))]);
  }
  if (failure !== undefined) throw failure;
  return result!;
}
