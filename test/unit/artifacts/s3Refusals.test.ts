/**
 * Issue 39, item 4: a store that answers but refuses (keys rotated or expired, a token expired, the
 * host's clock off, the bucket gone) is, mid-run, a StoreUnavailable the run waits on, with the store's
 * error named; before a run starts (checkStore) it stays a StoreConfigError naming the setting. The
 * S3 client's answers are faked here in the SDK's shape; test/integration/store-refusals.test.ts has
 * the real MinIO.
 */
import { S3ServiceException } from '@aws-sdk/client-s3';
import { StoreConfigError, StoreRefusedError, StoreUnavailableError } from '../../../src/artifacts/errors';
import { S3ArtifactStore } from '../../../src/artifacts/s3';
import { asActivityFailure, checkStore } from '../../../src/artifacts/stores';

/** A store whose every S3 call fails with the SDK error `name` / `status`. */
function refusing(name: string, status: number): S3ArtifactStore {
  const store = new S3ArtifactStore({ url: 's3://bkt/p', endpoint: 'http://minio:9000' }, '/tmp/ratchet-unused-cache');
  const err = new S3ServiceException({ name, $fault: status >= 500 ? 'server' : 'client', $metadata: { httpStatusCode: status }, message: `${name}: the store says no` });
  (store.client as unknown as { send: () => Promise<never> }).send = () => Promise.reject(err);
  return store;
}

describe('store refusals: waits mid-run, config errors at the start', () => {
  it.each([
    ['InvalidAccessKeyId', 403, /give this host valid keys/],
    ['SignatureDoesNotMatch', 403, /give this host valid keys/],
    ['AccessDenied', 403, /give this host valid keys/],
    ['ExpiredToken', 400, /give this host valid keys/],
    ['RequestTimeTooSkewed', 403, /sync this host's clock/],
    ['NoSuchBucket', 404, /bucket "bkt" is gone/],
    ['Forbidden', 403, /give this host valid keys/],
  ])('%s (HTTP %i) mid-run: StoreUnavailable naming it; at the start: StoreConfigError', async (name, status, fix) => {
    const err = await refusing(name, status).put('runs/r/x.json', '{}').then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect(err).toBeInstanceOf(StoreRefusedError);
    expect((err as Error).message).toContain(`refused the request (${name}`);
    expect((err as Error).message).toMatch(/waiting-for-store/);
    expect((err as Error).message).toMatch(fix);
    // What an activity reports: the type the workflow waits on.
    expect(asActivityFailure(err)).toMatchObject({ type: 'StoreUnavailable', message: expect.stringContaining(name) });
    const pre = await checkStore(refusing(name, status)).then(() => undefined, (e: unknown) => e);
    expect(pre).toBeInstanceOf(StoreConfigError);
    expect((pre as Error).message).toMatch(/^\[artifacts\] (url|region)/);
    expect((pre as Error).message).toMatch(/Fix:/);
  });

  it("a refused HEAD (no error body: the SDK's `Unknown`/`UnknownError`) is named by its HTTP status", async () => {
    const store = new S3ArtifactStore({ url: 's3://bkt/p', endpoint: 'http://minio:9000' }, '/tmp/ratchet-unused-cache');
    const headAnswer = (status: number) => new S3ServiceException({ name: 'Unknown', $fault: status >= 500 ? 'server' : 'client', $metadata: { httpStatusCode: status }, message: 'UnknownError' });
    (store.client as unknown as { send: () => Promise<never> }).send = () => Promise.reject(headAnswer(403));
    const refused = await store.put('runs/r/x.json', '{}').then(() => undefined, (e: unknown) => e);
    expect(refused).toBeInstanceOf(StoreRefusedError);
    expect((refused as Error).message).toContain('HTTP 403: no error body');
    expect((refused as Error).message).not.toMatch(/UnknownError/);
    (store.client as unknown as { send: () => Promise<never> }).send = () => Promise.reject(headAnswer(503));
    const down = await store.put('k', 'v').then(() => undefined, (e: unknown) => e);
    expect(down).toBeInstanceOf(StoreUnavailableError);
    expect((down as Error).message).toContain('HTTP 503: no error body');
  });

  it('a 5xx stays StoreUnavailable without a refusal; a 400 of another kind is neither', async () => {
    const down = await refusing('InternalError', 500).put('k', 'v').then(() => undefined, (e: unknown) => e);
    expect(down).toBeInstanceOf(StoreUnavailableError);
    expect(down).not.toBeInstanceOf(StoreRefusedError);
    const bad = await refusing('InvalidArgument', 400).put('k', 'v').then(() => undefined, (e: unknown) => e);
    expect(bad).not.toBeInstanceOf(StoreUnavailableError);
  });
});
