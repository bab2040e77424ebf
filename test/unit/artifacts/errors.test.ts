import { promises as fs, mkdtempSync, readdirSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { DiskFullError, diskFullFrom, StoreUnavailableError } from '../../../src/artifacts/errors';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { asActivityFailure, withStoreErrors } from '../../../src/artifacts/stores';

function errno(code: string, p?: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: no space left on device, write${p ? ` '${p}'` : ''}`), { code, ...(p ? { path: p } : {}) });
}

describe('a full disk is DiskFull, naming the path', () => {
  afterEach(() => jest.restoreAllMocks());

  test.each(['ENOSPC', 'EDQUOT'])('%s is classified, with the path Node names or the one given', (code) => {
    const named = diskFullFrom(errno(code, '/art/runs/r/x.json.tmp-1'));
    expect(named).toBeInstanceOf(DiskFullError);
    expect(named!.path).toBe('/art/runs/r/x.json.tmp-1');
    expect(named!.message).toMatch(/disk full writing \/art\/runs\/r\/x\.json\.tmp-1 .*waiting-for-disk/);
    expect(diskFullFrom(errno(code), '/art/fallback')!.path).toBe('/art/fallback');
  });

  test('other errors are not', () => {
    expect(diskFullFrom(errno('EACCES', '/x'))).toBeUndefined();
    expect(diskFullFrom(new Error('boom'))).toBeUndefined();
    expect(diskFullFrom(undefined)).toBeUndefined();
  });

  test('a store write that hits ENOSPC throws DiskFullError naming the file and leaves no temp file behind', async () => {
    const root = mkdtempSync(path.join(os.tmpdir(), 'ratchet-full-'));
    const store = new LocalArtifactStore(root);
    const real = fs.writeFile;
    jest.spyOn(fs, 'writeFile').mockImplementation(async (file, data) => {
      await real(file, typeof data === 'string' ? data.slice(0, 3) : 'abc');
      throw errno('ENOSPC'); // like a real write: part of it landed, no path on the error
    });
    const err = await store.putJson('runs/r/steps/0/record.json', { a: 1 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DiskFullError);
    expect((err as DiskFullError).path).toBe(path.join(root, 'runs/r/steps/0/record.json'));
    expect(readdirSync(path.join(root, 'runs/r/steps/0'))).toEqual([]);
  });

  test('activities report it as a non-retryable ApplicationFailure of type DiskFull, for the workflow to wait on', async () => {
    const failure = await withStoreErrors(async () => { throw errno('ENOSPC', '/cache/s3/obj'); }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure).toMatchObject({ type: 'DiskFull', nonRetryable: true });
    expect((failure as ApplicationFailure).message).toMatch(/\/cache\/s3\/obj/);
    // Store outages keep their own type; anything else passes through unchanged.
    expect(asActivityFailure(new StoreUnavailableError('s3://b', 'ECONNREFUSED'))).toMatchObject({ type: 'StoreUnavailable' });
    const other = new Error('boom');
    expect(asActivityFailure(other)).toBe(other);
  });
});
