/**
 * InferenceWait: the long tail of StepRollouts' wait for inference, in its own workflow
 * that continues as new. Workflow code.
 *
 * StepRollouts waits for inference when rollouts fail their retries: it syncs the step's
 * version into every replica (a restarted replica lost its adapters) and tries again
 * while inference is down. Each try costs ~10 events; the step's rollouts in progress
 * cannot cross a continue-as-new of StepRollouts, so after a few tries the sync request
 * (plain data) goes to this child, which keeps trying, continues as new every
 * `perExecution` tries, and returns once the version is served. StepRollouts' history
 * then holds one child per long outage, however long it lasts.
 */
import { ActivityFailure, ApplicationFailure, TimeoutFailure, continueAsNew, executeChild, log, sleep, workflowInfo } from '@temporalio/workflow';
import type { InferenceWaitInput, OutageWaitLimits } from '../contracts/outage';
import type { SyncWeightsInput } from '../contracts/activities';
import { DEFAULT_TRIES_PER_EXECUTION } from './outageWait';
import { syncAllHosts } from './weightSync';

/** The pause between weight-sync tries while inference is down: 5 s doubling to this. */
export const INFERENCE_WAIT_CAP_S = 60;

/**
 * Inference is down: a replica refuses (InferenceUnavailable), or, with per-host sync queues,
 * no worker of an inference host picks the sync up (schedule-to-start timeout) or it dies mid-sync.
 */
export function inferenceDown(err: unknown, hosts: string[]): boolean {
  if (!(err instanceof ActivityFailure)) return false;
  if (err.cause instanceof ApplicationFailure && err.cause.type === 'InferenceUnavailable') return true;
  return hosts.length > 0 && err.cause instanceof TimeoutFailure;
}

export async function InferenceWait(input: InferenceWaitInput): Promise<{ tries: number }> {
  const perExecution = input.limits?.perExecution ?? DEFAULT_TRIES_PER_EXECUTION;
  const cap = input.limits?.capS ?? INFERENCE_WAIT_CAP_S;
  let waitS = input.waitS;
  for (let tries = 0; ; tries++) {
    const soFar = (input.triesSoFar ?? 0) + tries;
    if (tries >= perExecution) {
      log.info('inference still down; continuing as new so this wait does not grow one history', { tries: soFar });
      await continueAsNew<typeof InferenceWait>({ ...input, waitS, triesSoFar: soFar });
    }
    await sleep(`${waitS} seconds`);
    try {
      await syncAllHosts(input.req, input.hosts);
      log.info('inference is back; the version is served', { policyVersion: input.req.policyVersion, tries: soFar + 1 });
      return { tries: soFar + 1 };
    } catch (err) {
      if (!inferenceDown(err, input.hosts)) throw err;
      waitS = Math.min(waitS * 2, cap);
    }
  }
}

/** Hands the wait to an InferenceWait child; returns once the version is served. */
export async function handOffInferenceWait(req: SyncWeightsInput, hosts: string[], waitS: number, limits: OutageWaitLimits | undefined, seq: number): Promise<void> {
  const info = workflowInfo();
  log.warn('a long inference outage: handing the wait to an InferenceWait workflow that continues as new', { policyVersion: req.policyVersion });
  await executeChild(InferenceWait, {
    args: [{ req, hosts, waitS, ...(limits ? { limits } : {}) }],
    // Unique per execution of the caller and per hand-off in it: replays name the same child.
    workflowId: `${info.workflowId}-inference-${info.runId.slice(0, 8)}-${seq}`,
    taskQueue: info.taskQueue,
  });
}
