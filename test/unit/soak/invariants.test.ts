/**
 * The run invariant "vLLM serves the final version" (src/soak/invariants.ts), checked on the
 * run's records: it must be able to fail on a completed run, whose adapters are unloaded by then.
 * And the soak's own: no checkpoint fallback (it corrupts none), an incident's wait status shown.
 */
import type { FallbackRecord, RunStatus, StepRecord } from '../../../src/contracts';
import { fallbackViolations, finalVersionServed, waitShownViolations } from '../../../src/soak/invariants';

const RUN = 'r1';
const URL = 'http://127.0.0.1:8000/v1';

function rec(step: number, version: number, weightSync?: unknown, skipped = false): StepRecord {
  return { step, policy_version: version, trainer: skipped ? { skipped: true } : { restarts: 0 }, ...(weightSync === undefined ? {} : { weight_sync: weightSync }) } as unknown as StepRecord;
}
const synced = (version: number, loaded: string[] = [`${URL}#${RUN}/policy-v${version}`], alreadyLoaded: string[] = []) =>
  ({ policyVersion: version, loaded, alreadyLoaded, unloaded: [], ms: 5 });

describe('finalVersionServed', () => {
  test('passes when the final version\'s weight sync says every replica serves its adapter', () => {
    expect(finalVersionServed([rec(0, 1, synced(1)), rec(1, 2, synced(2))], RUN, [URL])).toEqual([]);
    expect(finalVersionServed([rec(0, 1, synced(1, [], [`${URL}#${RUN}/policy-v1`]))], RUN, [`${URL}/`])).toEqual([]);
  });

  test('fails when no replica answered serving the final adapter (the violation a look at vLLM after the run cannot see)', () => {
    const v = finalVersionServed([rec(0, 1, synced(1)), rec(1, 2, synced(2, [`${URL}#${RUN}/policy-v1`]))], RUN, [URL]);
    expect(v).toEqual([expect.stringMatching(/step 1 \(version 2\): no replica answered serving r1\/policy-v2/)]);
  });

  test('fails when one replica of two did not serve it', () => {
    const other = 'http://10.0.0.8:8000/v1';
    const v = finalVersionServed([rec(0, 1, synced(1))], RUN, [URL, other]);
    expect(v).toEqual([expect.stringContaining(`was not served by ${JSON.stringify([other])}`)]);
  });

  test('fails when the final version has no weight sync on record, or one of another version', () => {
    expect(finalVersionServed([rec(0, 1)], RUN, [URL])).toEqual([expect.stringMatching(/no weight sync on record/)]);
    expect(finalVersionServed([rec(0, 1, synced(0))], RUN, [URL])).toEqual([expect.stringMatching(/served version 0, the trainer is at 1/)]);
    expect(finalVersionServed([rec(0, 1, { policyVersion: 1, ms: 3 })], RUN, [URL])).toEqual([expect.stringMatching(/does not say which replicas/)]);
  });

  test('a skipped last step: the version to serve is the last trained step\'s', () => {
    expect(finalVersionServed([rec(0, 1, synced(1)), rec(1, 1, undefined, true)], RUN, [URL])).toEqual([]);
    expect(finalVersionServed([rec(0, 1, undefined, true)], RUN, [URL])).toEqual([]);
  });
});

describe('no fallback committed by a transient error', () => {
  const fallback = (epoch: number, used?: number): FallbackRecord => ({
    format: 'ratchet.checkpoint-fallback/v1', run_id: RUN, epoch, time: '2026-11-28T13:00:00.000Z', by: 'trainer-load',
    bad: { step: 3, error: 'artifact store s3://ratchet/soak is unreachable' }, skipped: [], retrained_steps: [2, 3],
    ...(used === undefined ? {} : { used: { checkpoint: { uri: 's3://ratchet/c', sha256: 'a'.repeat(64), bytes: 1 }, step: used, policy_version: used + 1 } }),
  });

  test('a run with no fallback on record passes; each fallback is a violation naming its step, its error and where it went back to', () => {
    expect(fallbackViolations([])).toEqual([]);
    expect(fallbackViolations([fallback(1, 1), fallback(2)])).toEqual([
      expect.stringMatching(/epoch 1, by trainer-load.*step 3 did not verify with "artifact store s3:\/\/ratchet\/soak is unreachable", the run went back to step 1$/),
      expect.stringMatching(/epoch 2.*the run went back to the base model$/),
    ]);
  });
});

describe('an incident\'s wait is shown while it lasts', () => {
  const f = (kind: string, statuses?: RunStatus[], error?: string) => ({ index: 4, kind, step: 2, statuses, error });

  test('store-credentials must show waiting-for-store', () => {
    expect(waitShownViolations([f('store-credentials', ['running', 'waiting-for-store', 'running'])])).toEqual([]);
    expect(waitShownViolations([f('store-credentials', ['running'])])).toEqual([
      'fault 4 (store-credentials at step 2): the run never showed waiting-for-store while it lasted (it showed ["running"])',
    ]);
  });

  test('kinds with no wait of their own, faults not injected (their error is reported already) and outcomes without statuses are not judged', () => {
    expect(waitShownViolations([f('kill-main', ['running']), f('store-credentials', [], 'injection failed: x'), f('store-credentials')])).toEqual([]);
  });
});
