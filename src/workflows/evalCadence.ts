/**
 * The in-run eval cadence ([eval] every_steps, `ratchet set --eval-every`): which steps start an EvalSweep
 * on the checkpoint they saved, and starting it. Workflow code.
 *
 * - Due: after the step whose count of finished steps is a multiple of the cadence (every 2: after steps
 *   1, 3, 5...; 0: never), and only a step that trained and saved a checkpoint (a skipped step has none).
 * - The sweep is a child the run abandons (ParentClosePolicy and cancellation ABANDON): training never
 *   waits for it, and it finishes even after the run continues as new, completes, or is cancelled.
 * - It runs below training by priority (evalPriority: its own activities inherit it, its rollouts set
 *   it), with the run's fairness key: a sweep takes only the rollout slots the run's training leaves.
 * - Its adapter stays loaded while it runs: the run's weight syncs keep the versions of its running
 *   sweeps (keepFromVersion; across continue-as-new, for the whole next execution), and a run that ends
 *   waits (bounded) for them before unloading its adapters.
 * - Every due checkpoint is evaluated (no overlap skip, unlike `ratchet schedule eval`): the cadence is a
 *   curve over policy versions, and each sweep evaluates its own version only.
 */
import { ChildWorkflowCancellationType, ParentClosePolicy, log, startChild, workflowInfo } from '@temporalio/workflow';
import type { StoreSettings } from '../artifacts/settings';
import type { RunConfig } from '../config/schema';
import type { EvalSweepInput } from '../contracts/eval';
import type { EvalSweepStarted } from '../contracts/records';
import { evalPriority } from '../shared/fairness';
import { EvalSweep } from './evalSweep';
import type { RunControl } from './runControl';

/** How long a finished run waits for its running sweeps before it unloads its adapters anyway. */
export const EVAL_WAIT_AT_END = '2 hours';

/** The lowest version a weight sync keeps loaded: the run's own bound, or a running sweep's version. */
export function keepFromWithEvals(keepFrom: number, run: RunControl): number {
  return Math.min(keepFrom, ...run.evalsRunning.values(), ...run.carriedEvalVersions);
}

/** What continue-as-new carries of the running sweeps: their versions, kept loaded by the next execution. */
export function evalVersionsToCarry(run: RunControl): number[] {
  return [...new Set([...run.evalsRunning.values(), ...run.carriedEvalVersions])].sort((a, b) => a - b);
}

/** The [eval] section as in effect; a config stored before the section existed has none: off. */
export function evalSettingsOf(config: RunConfig): RunConfig['eval'] {
  const e = (config as Partial<RunConfig>).eval;
  return { every_steps: e?.every_steps ?? 0, taskset: e?.taskset ?? 'heldout', k: e?.k ?? 4, max_concurrent: e?.max_concurrent ?? 4 };
}

/** True after the steps a cadence of `every` evaluates: the (every)-th, (2 x every)-th... finished step. */
export function evalDue(step: number, every: number): boolean {
  return every > 0 && (step + 1) % every === 0;
}

/** The sweep's workflow id: one per step (and checkpoint epoch: a retrained step evaluates its new checkpoint). */
export function evalSweepId(runId: string, step: number, epoch = 0): string {
  return `${runId}-step-${step}-eval${epoch ? `-e${epoch}` : ''}`;
}

/** What the step record names: the sweep to start for `step`'s checkpoint of `policyVersion`. */
export function plannedSweep(runId: string, step: number, policyVersion: number, every: number, config: RunConfig, epoch = 0): EvalSweepStarted {
  const e = evalSettingsOf(config);
  return { workflow_id: evalSweepId(runId, step, epoch), policy_version: policyVersion, taskset: e.taskset, k: e.k, every_steps: every };
}

/** The sweep's input: this version only, on the run's own store. After a checkpoint fallback the version's older result is stale: redone. */
export function sweepInput(runId: string, sweep: EvalSweepStarted, config: RunConfig, artifacts: StoreSettings | undefined, epoch = 0): EvalSweepInput {
  return {
    runId, versions: [sweep.policy_version], taskset: sweep.taskset, k: sweep.k, maxConcurrent: evalSettingsOf(config).max_concurrent,
    ...(epoch ? { force: true } : {}),
    ...(artifacts ? { artifacts } : {}),
  };
}

/**
 * Starts the sweep the step record named (after the record is written: the sweep's plan reads the
 * version's adapter from it). A sweep that cannot start (its id already running) is logged, and
 * training goes on. Its outcome, when it comes, shows in the progress query (run.lastEval).
 */
export async function startEvalSweep(run: RunControl, step: number, sweep: EvalSweepStarted, input: EvalSweepInput): Promise<void> {
  let handle;
  try {
    handle = await startChild(EvalSweep, {
      args: [input],
      workflowId: sweep.workflow_id,
      taskQueue: workflowInfo().taskQueue,
      parentClosePolicy: ParentClosePolicy.ABANDON,
      cancellationType: ChildWorkflowCancellationType.ABANDON,
      // As every eval sweep's (docs/architecture.md): priority 4, the run's fairness key, weight 1.
      priority: evalPriority(input.runId),
    });
  } catch (err) {
    log.warn('could not start the eval sweep; training goes on', { step, workflowId: sweep.workflow_id, error: String(err) });
    run.lastEval = { ...sweep, step, state: 'failed', error: `not started: ${(err as Error).message}` };
    run.publish();
    return;
  }
  run.lastEval = { ...sweep, step, state: 'running' };
  run.evalsRunning.set(sweep.workflow_id, sweep.policy_version);
  const mine = () => run.lastEval?.workflow_id === sweep.workflow_id;
  void handle.result().then((r) => {
    run.evalsRunning.delete(sweep.workflow_id);
    if (!mine()) return;
    const result = r.evaluated.find((s) => s.version === sweep.policy_version);
    run.lastEval = { ...sweep, step, state: 'completed', ...(result ? { result } : {}) };
  }, (err: Error) => {
    run.evalsRunning.delete(sweep.workflow_id);
    if (!mine()) return;
    log.warn('in-run eval sweep failed; training goes on', { step, workflowId: sweep.workflow_id, error: String(err.cause ?? err) });
    run.lastEval = { ...sweep, step, state: 'failed', error: (err.cause as Error | undefined)?.message ?? err.message };
  });
}
