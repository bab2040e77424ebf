/**
 * Replays recorded TrainRun / StepRollouts histories through today's workflow
 * code: a change that would break running workflows (non-determinism) fails
 * here, before a deploy. Wrap such changes in patched('<id>').
 * Re-record: RATCHET_RECORD_HISTORIES=1 npx jest --selectProjects unit --runTestsByPath test/unit/workflow.test.ts
 */
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { DefaultLogger, Runtime, Worker } from '@temporalio/worker';
import { historyFromObject } from './workflowHistories';

jest.setTimeout(120_000);

const DIR = path.join(__dirname, '..', 'fixtures', 'histories');

test('recorded TrainRun histories replay deterministically', async () => {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const files = (await fs.readdir(DIR)).filter((f) => f.endsWith('.json')).sort();
  expect(files.length).toBeGreaterThanOrEqual(3);
  const histories = await Promise.all(files.map(async (f) => ({
    workflowId: f.replace(/\.json$/, ''),
    history: historyFromObject(JSON.parse(await fs.readFile(path.join(DIR, f), 'utf8'))),
  })));
  const failures: string[] = [];
  let replayed = 0;
  for await (const r of Worker.runReplayHistories({ workflowsPath: require.resolve('../../src/workflows'), replayName: 'ratchet-replay' }, histories)) {
    replayed++;
    if (r.error) failures.push(`${r.workflowId}: ${r.error.message}`);
  }
  expect(failures).toEqual([]);
  expect(replayed).toBe(files.length);
});
