/**
 * Lineage from 0.7 (issue 30): the sampling activity reports each env's task file as it read it
 * (sha256, size), trainer.save reports the trainer's code version, and both reach the step's
 * lineage and `ratchet lineage`'s text.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { createDatasetActivities } from '../../../src/activities/dataset';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { lineageText } from '../../../src/cli/lineage';
import { RunConfig } from '../../../src/config/schema';
import { StepLineage } from '../../../src/contracts/records';
import { stepLineage } from '../../../src/workflows/lineage';

const sha = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');

test('sampleTasks and writeStepManifest name each task file by its sha256 as read, again after it changes', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-lineage-'));
  try {
    const file = path.join(dir, 'a.jsonl');
    writeFileSync(file, '{"instance_id":"t1"}\n{"instance_id":"t2"}\n');
    const acts = createDatasetActivities({ logger: pino({ level: 'silent' }), store: new LocalArtifactStore(path.join(dir, 'store')), listInstanceIds: async () => ['t1', 't2'] });
    const input = { runId: 'r', step: 0, seed: 1, batchSize: 2, taskSetDir: dir, envs: [{ id: 'swe-grep', dataset: 'a.jsonl', weight: 1 }] };
    const first = await acts.sampleTasks(input);
    expect(first.files).toEqual([{ env: 'swe-grep', path: file, sha256: sha(file), bytes: readFileSync(file).length }]);
    writeFileSync(file, '{"instance_id":"t1"}\n{"instance_id":"t2"}\n{"instance_id":"t3"}\n');
    const second = await acts.sampleTasks({ ...input, step: 1 });
    expect(second.files![0]!.sha256).toBe(sha(file));
    expect(second.files![0]!.sha256).not.toBe(first.files![0]!.sha256);
    const cfg = RunConfig.parse({ name: 'x', env: [{ id: 'swe-grep' }] });
    const written = await acts.writeStepManifest({
      ...input, policyVersion: 0, modelName: 'm', rolloutsPerExample: 1, sampling: cfg.sampling,
      envs: [{ id: 'swe-grep', dataset: 'a.jsonl', weight: 1, args: cfg.env[0]!.args, rubric: {} }], sandbox: cfg.sandbox, inferenceBaseUrls: cfg.inference.base_urls, liveness: { heartbeat_every_s: 10, stall_s: 900 },
    });
    expect(written.files).toEqual(second.files);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the step lineage carries the task files and the trainer code of a trained step; the text prints them', () => {
  const config = RunConfig.parse({ name: 'x', env: [{ id: 'swe-grep' }] });
  const files = [{ env: 'swe-grep', path: '/t/a.jsonl', sha256: 'f'.repeat(64), bytes: 12 }];
  const code = { version: '0.1.0', sha256: 'd'.repeat(64), torch: '2.5.1', threads: 4 };
  const ref = (c: string) => ({ uri: `file:///${c}`, sha256: c.repeat(64), bytes: 1 });
  const base = { config, configSha256: 'c', seed: 1, step: 2, taskSetDir: '/t', tasks: 2, versionBefore: 2, taskFiles: files, trainerCode: code, checkpoint: ref('1'), adapter: ref('2') };
  const l = StepLineage.parse(stepLineage({ ...base, trained: true }));
  expect(l.tasks.files).toEqual(files);
  expect(l.trainer.code).toEqual(code);
  expect(stepLineage({ ...base, trained: false }).trainer.code).toBeUndefined();
  const text = lineageText(2, l);
  expect(text).toContain(`ratchet-trainer 0.1.0, sources sha256 ${'d'.repeat(64)}, torch 2.5.1, 4 threads`);
  expect(text).toContain(`task file[swe-grep]      /t/a.jsonl sha256 ${'f'.repeat(64)} (12 bytes)`);
  // A record from 0.6 (no files, no code) still parses and prints.
  const old = StepLineage.parse({ ...l, tasks: { ...l.tasks, files: undefined }, trainer: { ...l.trainer, code: undefined } });
  expect(lineageText(2, old)).toMatch(/trainer code\s+\(not reported/);
});
