/**
 * Recorded workflow histories, kept per release under test/fixtures/histories/v<version>/
 * (package.json's version). A release's histories are never rewritten by a later
 * one: recording writes only into the current release's folder, and the replay
 * test replays every folder, so a change that breaks a run started on any
 * earlier release fails CI. Record with `bash infra/record-histories.sh`.
 */
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { recordedHistoryToObject } from '../../src/shared/historyJson';

export const HISTORIES_ROOT = path.join(__dirname, '..', 'fixtures', 'histories');
// RATCHET_HISTORIES_RELEASE names the next release's folder while package.json still has the current one.
// eslint-disable-next-line @typescript-eslint/no-require-imports -- package.json is not a module
export const RELEASE = process.env.RATCHET_HISTORIES_RELEASE ?? `v${(require('../../package.json') as { version: string }).version}`;

export const recording = (): boolean => process.env.RATCHET_RECORD_HISTORIES === '1';

/** Writes the workflow's history as <RELEASE>/<name>.json when recording; otherwise nothing. */
export async function recordHistory(handle: WorkflowHandle, name: string): Promise<void> {
  if (!recording()) return;
  const history = await handle.fetchHistory();
  const dir = path.join(HISTORIES_ROOT, RELEASE);
  await fs.mkdir(dir, { recursive: true });
  await fs.writeFile(path.join(dir, `${name}.json`), `${JSON.stringify(recordedHistoryToObject(handle.workflowId, history), null, 1)}\n`);
}

/** Every stored history: [release, file] pairs, oldest release first. */
export async function storedHistories(): Promise<{ release: string; file: string }[]> {
  const releases = (await fs.readdir(HISTORIES_ROOT, { withFileTypes: true })).filter((d) => d.isDirectory()).map((d) => d.name).sort();
  const out: { release: string; file: string }[] = [];
  for (const release of releases) {
    for (const f of (await fs.readdir(path.join(HISTORIES_ROOT, release))).filter((n) => n.endsWith('.json')).sort()) {
      out.push({ release, file: path.join(HISTORIES_ROOT, release, f) });
    }
  }
  return out;
}
