import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ArtifactIntegrityError, LocalArtifactStore, sha256, uriToPath, verifyRef } from '../../../src/artifacts/store';

describe('local artifact store', () => {
  let root: string;
  let store: LocalArtifactStore;
  beforeEach(async () => {
    root = await fs.mkdtemp(path.join(os.tmpdir(), 'ratchet-artifacts-'));
    store = new LocalArtifactStore(root);
  });
  afterEach(() => fs.rm(root, { recursive: true, force: true }));

  test('put returns a claim check that get verifies', async () => {
    const ref = await store.putJson('runs/r1/x.json', { a: 1 });
    expect(ref.sha256).toBe(sha256('{"a":1}'));
    expect(await store.getJson(ref)).toEqual({ a: 1 });
    expect(await store.exists('runs/r1/x.json')).toEqual(ref);
    expect(await store.exists('runs/r1/missing.json')).toBeUndefined();
    // no temp files left behind by the atomic write
    expect(await fs.readdir(path.join(root, 'runs', 'r1'))).toEqual(['x.json']);
  });

  test('a corrupt artifact fails with both hashes and the fix', async () => {
    const ref = await store.put('runs/r1/b.bin', Buffer.from('hello'));
    await fs.writeFile(uriToPath(ref.uri), 'hellO');
    await expect(store.get(ref)).rejects.toThrow(ArtifactIntegrityError);
    await expect(verifyRef(ref)).rejects.toThrow(/recorded sha256 [0-9a-f]{64}, found [0-9a-f]{64}.*Fix:/);
  });

  test('keys cannot escape the store', () => {
    expect(() => store.localPath('../etc/passwd')).toThrow(/escapes the store root/);
    expect(() => store.localPath('/etc/passwd')).toThrow(/escapes the store root/);
  });
});
