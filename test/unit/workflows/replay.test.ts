/**
 * Replays every recorded TrainRun / StepRollouts / EvalSweep history, of every
 * release (test/fixtures/histories/v<version>/), through today's workflow code:
 * a change that would break running workflows (non-determinism) fails here,
 * before a deploy. Wrap such changes in patched() (src/workflows/patches.ts).
 * Record: bash infra/record-histories.sh (README: "Upgrading under running runs").
 */
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { recordedHistoryFromObject } from '../../../src/shared/historyJson';
import { storedHistories } from '../../helpers/histories';
import { workflowBundle } from '../../helpers/workflowBundle';

jest.setTimeout(300_000);

test('every recorded history of every release replays deterministically', async () => {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const stored = await storedHistories();
  expect(new Set(stored.map((s) => s.release)).size).toBeGreaterThanOrEqual(1);
  expect(stored.length).toBeGreaterThanOrEqual(3);
  // Each replays under the workflow id it was recorded with (older files: a name from the file).
  const histories = await Promise.all(stored.map(async (s) => recordedHistoryFromObject(
    JSON.parse(await fs.readFile(s.file, 'utf8')),
    `${s.release}/${path.basename(s.file, '.json')}`,
  )));
  const failures: string[] = [];
  let replayed = 0;
  // Today's src/workflows, from the shared bundle cache (keyed by the sources' content, so never stale).
  for await (const r of Worker.runReplayHistories({ workflowBundle: await workflowBundle(), replayName: 'ratchet-replay' }, histories)) {
    replayed++;
    if (r.error) failures.push(`${r.workflowId}: ${r.error.message}`);
  }
  expect(failures).toEqual([]);
  expect(replayed).toBe(stored.length);
});
