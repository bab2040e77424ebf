/**
 * Weight sync that waits out a down inference server instead of failing the
 * run: the run shows `waiting-for-inference` until every replica serves the
 * version. An outage that outlasts `maxWaits` attempts hands back
 * CONTINUE_AS_NEW, so the caller can carry on in a fresh history (an outage of
 * days would otherwise add a timer and an activity per minute). Workflow code.
 */
import { ActivityFailure, ApplicationFailure, TimeoutFailure, deprecatePatch, log, patched, sleep } from '@temporalio/workflow';
import type { SyncWeightsInput } from '../contracts/activities';
import { DEPRECATED_PATCHES, PATCHES } from './patches';
import { sync, syncOn } from './proxies';
import type { RunControl } from './runControl';
import { untilStore } from './storeWait';

export const CONTINUE_AS_NEW = 'continue-as-new' as const;

/** Failed attempts one execution waits through by default: about an hour at the 60 s cap. */
export const DEFAULT_INFERENCE_WAITS_PER_EXECUTION = 60;

export const isInferenceUnavailable = (err: unknown): err is ActivityFailure & { cause: ApplicationFailure } =>
  err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'InferenceUnavailable';

/**
 * Weight sync: by the main worker (vLLM reads the adapter path: one machine or a shared
 * disk), or, with inference.sync_task_queues, by each inference host's own worker,
 * which pulls the adapter from the store into its cache first. Slowest host's time.
 */
export function syncAllHosts(req: SyncWeightsInput, hosts: string[]): Promise<{ ms: number; behind?: string[] }> {
  const { quorum, ...every } = req;
  // patched() only where a quorum is asked for: a history from before it synced every replica, and replays so.
  const q = quorum !== undefined && patched(PATCHES.replicaQuorum) ? quorum : undefined;
  // Not async: with no hosts the activity's own promise comes back (no added microtasks; see storeWait.ts).
  // The activity itself counts the quorum over the base URLs.
  if (hosts.length === 0) return sync.syncWeights(q === undefined ? every : { ...every, quorum: q });
  if (q === undefined) {
    return Promise.all(hosts.map((h) => syncOn(h).syncWeights({ ...every, baseUrls: [] })))
      .then((results) => ({ ...results[0]!, ms: Math.max(...results.map((r) => r.ms)) }));
  }
  return syncQuorumOfHosts(every, hosts, q);
}

/** An inference host that is down: its vLLM refuses (InferenceUnavailable), or its worker does not pick up / dies. */
const hostDown = (err: unknown): boolean => err instanceof ActivityFailure
  && ((err.cause instanceof ApplicationFailure && err.cause.type === 'InferenceUnavailable') || err.cause instanceof TimeoutFailure);

/**
 * Each host syncs its own replicas; every host's answer is awaited (a slow host still gets the version),
 * and `quorum` of them serving it is enough. A host that failed otherwise (a refused adapter) fails the sync.
 */
async function syncQuorumOfHosts(req: SyncWeightsInput, hosts: string[], quorum: number): Promise<{ ms: number; behind?: string[] }> {
  const settled = await Promise.allSettled(hosts.map((h) => syncOn(h).syncWeights({ ...req, baseUrls: [] })));
  const failed = settled.flatMap((s, i) => (s.status === 'rejected' ? [{ host: hosts[i]!, err: s.reason as unknown }] : []));
  const other = failed.find((f) => !hostDown(f.err));
  if (other) throw other.err;
  const served = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  if (served.length < quorum) throw failed[0]!.err;
  if (failed.length) log.warn('weights synced to a quorum of inference hosts; the rest are behind', { quorum, behind: failed.map((f) => f.host) });
  return { ...served[0]!, ms: Math.max(...served.map((r) => r.ms)), ...(failed.length ? { behind: failed.map((f) => f.host) } : {}) };
}

export async function syncUntilServed(
  run: RunControl,
  input: () => SyncWeightsInput,
  maxWaits = DEFAULT_INFERENCE_WAITS_PER_EXECUTION,
  hosts: string[] = [],
): Promise<{ ms: number } | typeof CONTINUE_AS_NEW> {
  for (let wait = 5, attempts = 1; ; wait = Math.min(wait * 2, 60), attempts++) {
    try {
      const r = await untilStore(run, () => syncAllHosts(input(), hosts));
      run.setWaitingForInference(false);
      return r;
    } catch (err) {
      // An inference host's worker that does not pick up (schedule-to-start timeout) is inference down too.
      const hostDown = hosts.length > 0 && err instanceof ActivityFailure && err.cause instanceof TimeoutFailure;
      if (!hostDown && !isInferenceUnavailable(err)) throw err;
      if (run.setWaitingForInference(true)) log.warn('inference is down; the run waits for it', { error: String((err as ActivityFailure).cause?.message ?? err) });
      if (attempts >= maxWaits) {
        deprecatePatch(DEPRECATED_PATCHES.inferenceWaitContinueAsNew);
        log.warn('inference still down; continuing as new so the wait does not grow this history', { attempts });
        return CONTINUE_AS_NEW;
      }
      await sleep(`${wait} seconds`);
    }
  }
}
