/** Which [artifacts] store `ratchet eval` reads a run from without --config: the one TrainRun recorded in its memo. */
import type { Client } from '@temporalio/client';
import { recordedArtifacts } from '../../../src/cli/evalInput';

describe('recordedArtifacts (the store ratchet eval uses without --config)', () => {
  const clientWith = (describe: () => Promise<unknown>) => ({ workflow: { getHandle: () => ({ describe }) } }) as unknown as Client;

  it('reads the [artifacts] settings TrainRun recorded in its memo', async () => {
    const artifacts = { url: 's3://bucket/prefix', endpoint: 'http://minio:9000' };
    await expect(recordedArtifacts(clientWith(async () => ({ memo: { artifacts } })), 'r1')).resolves.toEqual(artifacts);
  });

  it('is undefined for a run on the default store or with no workflow', async () => {
    await expect(recordedArtifacts(clientWith(async () => ({ memo: {} })), 'r1')).resolves.toBeUndefined();
    await expect(recordedArtifacts(clientWith(async () => { throw new Error('not found'); }), 'r1')).resolves.toBeUndefined();
  });
});
