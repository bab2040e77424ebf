/**
 * The multi-host test's store audit (test/helpers/multihostInvariants.ts) can fail: a
 * stale attempt's bytes under a trajectory's content key, or under one file of the recorded
 * checkpoint, or state.json rolled back, each break it. On a local store with the keys a
 * run writes (src/artifacts/keys.ts).
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { runKeys } from '../../../src/artifacts/keys';
import type { StepRecord } from '../../../src/contracts';
import { auditStoreAgainstRecords } from '../../helpers/multihostInvariants';

const sha = (b: string): string => createHash('sha256').update(b).digest('hex');
const RUN = 'r1';

async function runInStore(): Promise<{ store: LocalArtifactStore; records: StepRecord[]; trajKey: string; ckptDir: string }> {
  const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'audit-')));
  const records: StepRecord[] = [];
  let trajKey = '';
  let ckptDir = '';
  for (const step of [0, 1]) {
    const summaries = [];
    for (const i of [0, 1]) {
      const body = JSON.stringify({ step, i, attempt: 2 });
      const key = runKeys.trajectory(RUN, step, 'g0', i, sha(body));
      summaries.push({ trajectory: await store.put(key, body) });
      trajKey = key;
      // A stale attempt of the same rollout: other bytes, so another content key beside it.
      const stale = JSON.stringify({ step, i, attempt: 1 });
      await store.put(runKeys.trajectory(RUN, step, 'g0', i, sha(stale)), stale);
    }
    await store.putJson(runKeys.rolloutSummaries(RUN, step), summaries);
    const src = mkdtempSync(path.join(os.tmpdir(), 'ckpt-'));
    mkdirSync(path.join(src, 'adapter'));
    writeFileSync(path.join(src, 'adapter', 'weights.bin'), `weights ${step}`);
    ckptDir = runKeys.checkpoint(RUN, step + 1, sha(`batch ${step}`));
    const checkpoint = await store.putDir(ckptDir, src);
    records.push({ step, rollouts: 2, policy_version: step + 1, checkpoint } as unknown as StepRecord);
  }
  await store.putJson(runKeys.state(RUN), { completedStep: 1, checkpoint: records[1]!.checkpoint });
  return { store, records, trajKey, ckptDir };
}

describe('store audit against the records', () => {
  test('passes on a run whose stale attempts wrote beside the winners, and counts them', async () => {
    const { store, records } = await runInStore();
    const audit = await auditStoreAgainstRecords({ runId: RUN, records, store });
    expect(audit).toEqual({ trajectoryObjects: 8, unreferencedTrajectories: 4, checkpointDirs: 2, attemptCheckpointDirs: 0 });
  });

  test('fails when a stale attempt overwrote a recorded trajectory', async () => {
    const { store, records, trajKey } = await runInStore();
    await store.put(trajKey, JSON.stringify({ stale: true }));
    await expect(auditStoreAgainstRecords({ runId: RUN, records, store })).rejects.toThrow();
  });

  test('fails when a stale save replaced one file of the recorded checkpoint', async () => {
    const { store, records, ckptDir } = await runInStore();
    await store.put(`${ckptDir}/adapter/weights.bin`, 'the other save\'s weights');
    await expect(auditStoreAgainstRecords({ runId: RUN, records, store })).rejects.toThrow();
  });

  test('fails when state.json was rolled back to an earlier step', async () => {
    const { store, records } = await runInStore();
    await store.putJson(runKeys.state(RUN), { completedStep: 0, checkpoint: records[0]!.checkpoint });
    await expect(auditStoreAgainstRecords({ runId: RUN, records, store })).rejects.toThrow();
  });
});
