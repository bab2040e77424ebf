/**
 * The support window (src/workflows/patches.ts, docs/upgrades.md): patches of releases before
 * OLDEST_UPGRADABLE_RELEASE are deprecated (no old branch, `deprecatePatch` only), live patches
 * are all inside the window and all in use, and no recorded history older than the window is
 * left in the replay set. The replay test (workflowReplay.test.ts) judges what remains.
 */
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { DEPRECATED_PATCHES, OLDEST_UPGRADABLE_RELEASE, PATCHES } from '../../../src/workflows/patches';
import { HISTORIES_ROOT } from '../../helpers/histories';

const WORKFLOWS = path.join(__dirname, '..', '..', '..', 'src', 'workflows');

const release = (v: string): [number, number] => {
  const m = /^v?(\d+)\.(\d+)/.exec(v);
  if (!m) throw new Error(`no release in "${v}"`);
  return [Number(m[1]), Number(m[2])];
};
const before = (a: [number, number], b: [number, number]) => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);
const oldest = release(OLDEST_UPGRADABLE_RELEASE);

async function workflowSources(): Promise<string> {
  const files = (await fs.readdir(WORKFLOWS)).filter((f) => f.endsWith('.ts') && f !== 'patches.ts');
  return (await Promise.all(files.map((f) => fs.readFile(path.join(WORKFLOWS, f), 'utf8')))).join('\n');
}

test('every live patch belongs to a release inside the window and is checked by patched()', async () => {
  const src = await workflowSources();
  for (const [key, id] of Object.entries(PATCHES)) {
    expect([id, before(release(id), oldest)]).toEqual([id, false]);
    expect([key, src.includes(`PATCHES.${key}`)]).toEqual([key, true]);
  }
});

test('a deprecated patch is never checked with patched(): its old branch is gone', async () => {
  const src = await workflowSources();
  const ids = new Set<string>(Object.values(PATCHES));
  for (const [key, id] of Object.entries(DEPRECATED_PATCHES)) {
    expect(ids.has(id)).toBe(false);
    expect([key, new RegExp(`patched\\([^)]*DEPRECATED_PATCHES\\.${key}\\b`).test(src)]).toEqual([key, false]);
    expect([key, src.includes(`'${id}'`)]).toEqual([key, false]);
  }
});

test('no recorded history older than the window is left in the replay set', async () => {
  const releases = (await fs.readdir(HISTORIES_ROOT, { withFileTypes: true })).filter((d) => d.isDirectory()).map((d) => d.name);
  expect(releases.length).toBeGreaterThan(0);
  expect(releases.filter((r) => before(release(r), oldest))).toEqual([]);
});
