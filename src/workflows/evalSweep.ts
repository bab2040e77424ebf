/**
 * EvalSweep: policy versions × a held-out task set × k samples. Episodes run on
 * the rollout worker (`rollout`, queue ratchet-rollout), the same code path as
 * training; planning and scoring are activities on `ratchet`. Results go to the
 * artifact store (runs/<run>/evals/<version>/<taskset-hash>.json) and, small, to
 * this workflow's memo, so the Web UI shows them without opening a file.
 */
import { ApplicationFailure, deprecatePatch, log, proxyActivities, upsertMemo, workflowInfo } from '@temporalio/workflow';
import type { RolloutActivities, RolloutInput } from '../contracts';
import type { EvalEpisode, EvalPlan, EvalSweepInput, EvalSweepResult, EvalVersionSummary } from '../contracts/eval';
import { adapterName } from '../shared/adapters';
import { evalSeed } from '../shared/evalSeed';
import { EVAL_STEP } from '../shared/steps';
import { forActivity, livenessOf } from '../shared/liveness';
import { syncAllHosts } from './weightSync';
import { DEPRECATED_PATCHES } from './patches';
import { evalPlan, evalRecord, evalRolloutOptions, evalSync } from './proxies';

export type { EvalSweepInput, EvalSweepResult } from '../contracts/eval';

/** Runs fn over items with at most `width` in flight: bounded fan-out, deterministic order of results. */
async function slidingWindow<T, R>(items: T[], width: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const lane = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(width, items.length)) }, lane));
  return out;
}

/**
 * Whether a version is an adapter to load, not the base model: every trained version, and version 0
 * of a warm-started run (`[model] init_from`: the plan names its adapter). Plans from before that
 * never name an adapter for 0, so their histories replay unchanged without a patch.
 */
export function servesAdapter(plan: EvalPlan, version: number): boolean {
  return version > 0 || plan.adapters['0'] !== undefined;
}

export function evalRolloutInput(plan: EvalPlan, version: number, instanceId: string, datasetPath: string, taskIndex: number, sample: number): RolloutInput {
  return {
    runId: plan.runId,
    step: EVAL_STEP,
    groupId: `eval-v${version}-${instanceId}`,
    rolloutIndex: sample,
    envId: plan.envId,
    task: { datasetPath, instanceId },
    taskSetDir: plan.taskSetDir,
    policyVersion: version,
    modelName: servesAdapter(plan, version) ? adapterName(plan.runId, version) : plan.servedModel,
    sampling: plan.sampling,
    envArgs: plan.envArgs,
    rubric: plan.rubric,
    sandbox: plan.sandbox,
    inferenceBaseUrl: plan.inferenceBaseUrl,
    // A plan's `seeds` comes from its sweep's input (recorded with the plan): histories from before it never have it.
    seed: plan.seeds === 'task-sample' ? evalSeed(instanceId, sample) : (plan.seed * 1_000_003 + version * 7919 + taskIndex * 131 + sample) >>> 0,
    liveness: forActivity(livenessOf(plan), 'rollout'),
    // The run's store, not the rollout worker's default: on another host a local path is unreadable.
    ...(plan.artifacts ? { artifacts: plan.artifacts } : {}),
  };
}

export async function EvalSweep(input: EvalSweepInput): Promise<EvalSweepResult> {
  if (!input?.runId) throw ApplicationFailure.nonRetryable('EvalSweep input needs runId, e.g. {"runId": "smoke-1", "newest": 1}', 'InvalidInput');
  const { workflowId } = workflowInfo();
  const plan = await evalPlan(input);
  const evaluated: EvalVersionSummary[] = [];
  upsertMemo({ runId: plan.runId, taskset: plan.taskset, k: plan.k, skipped: plan.skipped, evaluated });
  log.info('eval sweep', { runId: plan.runId, versions: plan.versions, skipped: plan.skipped });

  const { rollout } = proxyActivities<RolloutActivities>(evalRolloutOptions(plan.runId));
  const jobs = plan.tasks.flatMap((t, ti) => Array.from({ length: plan.k }, (_, s) => ({ t, ti, s })));
  for (const version of plan.versions) {
    const startedAt = new Date().toISOString();
    if (servesAdapter(plan, version)) {
      const adapter = plan.adapters[String(version)];
      if (!adapter) throw ApplicationFailure.nonRetryable(`run ${plan.runId} has no adapter recorded for policy v${version}; it cannot be served`, 'VersionNotFound');
      // Load only (keepFromVersion 0 unloads nothing): a run training on the same server keeps its adapters.
      const req = { runId: plan.runId, baseUrls: [plan.inferenceBaseUrl], policyVersion: version, adapter, keepFromVersion: 0,
        ...(plan.artifacts ? { artifacts: plan.artifacts } : {}), liveness: forActivity(livenessOf(plan), 'weight_sync') };
      // Inference hosts that share no disk with this worker: each one's own worker pulls the
      // adapter from the run's store into its cache and loads it, exactly as TrainRun syncs.
      if (plan.syncTaskQueues?.length) {
        deprecatePatch(DEPRECATED_PATCHES.evalSyncHosts);
        await syncAllHosts(req, plan.syncTaskQueues);
      } else {
        await evalSync.syncWeights(req);
      }
    }
    const episodes = await slidingWindow(jobs, input.maxConcurrent ?? 4, async ({ t, ti, s }): Promise<EvalEpisode> => {
      try {
        const summary = await rollout(evalRolloutInput(plan, version, t.instanceId, t.datasetPath, ti, s));
        return { instanceId: t.instanceId, sample: s, summary };
      } catch (err) {
        // One broken episode must not sink the sweep; it is counted in the result's `errors`.
        return { instanceId: t.instanceId, sample: s, error: (err as Error).message };
      }
    });
    if (episodes.every((e) => e.error)) {
      throw ApplicationFailure.nonRetryable(`every episode of policy v${version} failed; first error: ${episodes[0]?.error}`, 'AllEpisodesFailed');
    }
    const summary = await evalRecord({ plan, version, episodes, startedAt, finishedAt: new Date().toISOString(), workflowId });
    evaluated.push(summary);
    upsertMemo({ evaluated });
  }
  return { runId: plan.runId, taskset: plan.taskset, k: plan.k, evaluated, skipped: plan.skipped };
}
