/**
 * A real run's workflow histories, for the replay test (test/unit/workflows/replay.test.ts):
 * every execution of the TrainRun (continue-as-new chains have several) as JSON. The soak
 * writes its faulted run's into <RATCHET_HOME>/test-reports/soak-histories/ and, with
 * RATCHET_RECORD_HISTORIES=1, into test/fixtures/histories/v<version>/ as real-soak-*.json
 * (kept per release, never overwritten by a later one).
 *
 *   node dist/soak/histories.js <workflow id> <dir> <file prefix>
 */
import { promises as fs, readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { Client } from '@temporalio/client';
import { connectClient } from '../cli/temporal';
import { recordedHistoryToObject } from '../shared/historyJson';
import { REPO_ROOT } from '../shared/paths';

/** test/fixtures/histories/v<package.json version>: where this release's recorded histories go. */
export function releaseHistoriesDir(): string {
  const { version } = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
  return path.join(REPO_ROOT, 'test', 'fixtures', 'histories', `v${version}`);
}

/** Writes <prefix>-<n>.json for each execution of `workflowId`, oldest first (just <prefix>.json for one). */
export async function saveRunHistories(client: Client, workflowId: string, dir: string, prefix: string): Promise<string[]> {
  const runs: { runId: string; start: number }[] = [];
  for await (const w of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) runs.push({ runId: w.runId, start: w.startTime.getTime() });
  runs.sort((a, b) => a.start - b.start);
  await fs.mkdir(dir, { recursive: true });
  const files: string[] = [];
  for (const [i, r] of runs.entries()) {
    const history = await client.workflow.getHandle(workflowId, r.runId).fetchHistory();
    const file = path.join(dir, runs.length === 1 ? `${prefix}.json` : `${prefix}-${i + 1}.json`);
    await fs.writeFile(file, `${JSON.stringify(recordedHistoryToObject(workflowId, history), null, 1)}\n`);
    files.push(file);
  }
  return files;
}

if (require.main === module) {
  const [workflowId, dir, prefix] = process.argv.slice(2);
  if (!workflowId || !dir || !prefix) {
    process.stderr.write('usage: node dist/soak/histories.js <workflow id> <dir> <file prefix>\n');
    process.exit(2);
  }
  void (async () => {
    const { client, close } = await connectClient();
    try {
      for (const f of await saveRunHistories(client, workflowId, dir, prefix)) process.stdout.write(`${f}\n`);
    } finally {
      await close();
    }
  })();
}
