/**
 * Environments from modules that are broken: each gets an error naming the
 * module and what is missing, from `ratchet check` (and from openRun, before
 * any rollout), never a failure deep inside a rollout.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { main } from '../../../src/cli/index';
import { EXIT } from '../../../src/cli/exit';
import { createConfigActivities } from '../../../src/activities/config';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { componentLogger } from '../../../src/shared/logger';
import { QWEN3_DIR } from '../../fixtures/samples/simulate';

jest.setTimeout(60_000);

const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-envmod-'));
const ZOD = JSON.stringify(require.resolve('zod'));
const DATA = path.join(dir, 'tasks.jsonl');
writeFileSync(DATA, JSON.stringify({ instance_id: 't1', repo: 'r', base_commit: 'none', problem_statement: 'count', patch: '', FAIL_TO_PASS: [] }) + '\n');

const GOOD_TOOL = `{ name: 'answer', description: 'answer', args: z.object({ n: z.number() }), async run(a) { return { content: 'ok', answer: a }; } }`;
const GOOD_REWARD = `{ name: 'right', weight: 1, fn: () => 1 }`;
function envModule(name: string, body: string): string {
  const file = path.join(dir, `${name}.js`);
  writeFileSync(file, `const { z } = require(${ZOD});\n${body}\n`);
  return file;
}
function envBody(over: Record<string, string> = {}): string {
  const fields = { systemPrompt: `'sys'`, userPrompt: '(t) => t.problem_statement', needsRepository: 'false', tools: `[${GOOD_TOOL}]`, rubric: `[${GOOD_REWARD}]`, ...over };
  return `module.exports.environment = { ${Object.entries(fields).filter(([, v]) => v !== '').map(([k, v]) => `${k}: ${v}`).join(', ')} };`;
}

function config(module: string): string {
  const file = path.join(dir, `${path.basename(module)}.toml`);
  writeFileSync(file, `[model]\npath = ${JSON.stringify(QWEN3_DIR)}\n[[env]]\nid = "mine"\nmodule = ${JSON.stringify(module)}\ndataset = ${JSON.stringify(DATA)}\n`);
  return file;
}

let err: string[];
beforeEach(() => {
  err = [];
  jest.spyOn(console, 'log').mockImplementation(() => undefined);
  jest.spyOn(console, 'error').mockImplementation((...a) => { err.push(a.join(' ')); });
});
afterEach(() => jest.restoreAllMocks());

test('a well-formed module passes (so each failure below is the one thing broken)', async () => {
  const code = await main(['check', config(envModule('good', envBody())), '--offline']);
  expect(err.join('\n')).toBe('');
  expect(code).toBe(EXIT.ok);
});

test.each([
  ['no export at all', 'module.exports = {};', /no environment exported: export `environment`/],
  ['a missing systemPrompt', envBody({ systemPrompt: '' }), /missing export field `systemPrompt`/],
  ['a missing userPrompt', envBody({ userPrompt: '' }), /missing export field `userPrompt`/],
  ['no tools', envBody({ tools: '[]' }), /missing export field `tools`/],
  ['a tool without a schema', envBody({ tools: `[{ name: 'bash', description: 'run', async run() { return { content: '' }; } }]` }), /tool "bash": no schema: `args` must be a zod object/],
  ['a tool with a plain-object schema', envBody({ tools: `[{ name: 'bash', description: 'run', args: { command: 'string' }, async run() { return { content: '' }; } }]` }), /tool "bash": no schema/],
  ['a tool without run', envBody({ tools: `[{ name: 'bash', description: 'run', args: z.object({}) }]` }), /tool "bash": missing `run\(args, ctx\)`/],
  ['two tools with one name', envBody({ tools: `[${GOOD_TOOL}, ${GOOD_TOOL}]` }), /tool "answer": two tools have this name/],
  ['a tool schema the model cannot be sent', envBody({ tools: `[{ name: 'x', description: 'x', args: z.object({ d: z.date() }), async run() { return { content: '' }; } }]` }), /tool "x": its schema cannot be sent to the model: zodToJsonSchema: unsupported zod type ZodDate/],
  ['no rubric', envBody({ rubric: '[]' }), /missing export field `rubric`/],
  ['a reward without fn', envBody({ rubric: `[{ name: 'r', weight: 1 }]` }), /reward "r": missing `fn\(input\)`/],
  ['a reward weight that is not a number', envBody({ rubric: `[{ name: 'r', weight: 'high', fn: () => 1 }]` }), /reward "r": `weight` must be a finite number/],
  ['a reward that is not a number', envBody({ rubric: `[{ name: 'r', weight: 1, fn: () => 'yes' }]` }), /reward "r" returned a string \("yes"\).*a reward returns a finite number/],
  ['a reward that is NaN', envBody({ rubric: `[{ name: 'r', weight: 1, fn: () => NaN }]` }), /reward "r" returned NaN/],
  ['a reward that throws', envBody({ rubric: `[{ name: 'r', weight: 1, fn: (i) => i.final.files.length }]` }), /reward "r" threw on an empty answer/],
  ['an id other than the config says', envBody({ id: `'theirs'` }), /exports id "theirs", but the run config's \[\[env\]\]\.id is "mine"/],
  ['a module that throws on load', 'throw new Error("boom at import");', /loading it threw: Error: boom at import/],
  ['eval metrics naming a reward it does not have', envBody({ evalMetrics: `{ solved: { reward: 'wrong', min: 1 } }` }), /evalMetrics\.solved\.reward must name a reward of the rubric \(got "wrong"; rewards: right\)/],
  ['localization without all three rewards', envBody({ evalMetrics: `{ localization: { file: { precision: 'right', recall: 'right' } } }` }), /evalMetrics\.localization\.file\.f1 must name a reward of the rubric/],
  ['a harness with a relative program and no time limit', envBody({ harness: `{ name: 'mine', command: ['python', '-m', 'x'] }` }), /harness\.command\[0\] must be an absolute path[\s\S]*harness\.timeout_s must be a positive number/],
  ['a harness whose program is not installed', envBody({ harness: `{ name: 'mine', command: ['/nonexistent/bin/python'], timeout_s: 60 }` }), /its harness program \/nonexistent\/bin\/python is not installed/],
])('%s: named with the module, before anything starts', async (name, body, message) => {
  const file = envModule(name.replace(/\W+/g, '-'), body);
  const code = await main(['check', config(file), '--offline']);
  expect(code).toBe(EXIT.invalidInput);
  const text = err.join('\n');
  expect(text).toContain(`environment module ${file}`);
  expect(text).toMatch(message);
});

test('eval metrics that name its rewards are kept', async () => {
  const { loadEnvironment } = await import('../../../src/envs/load');
  const file = envModule('with-eval-metrics', envBody({ evalMetrics: `{ solved: { reward: 'right', min: 1 } }` }));
  expect(loadEnvironment({ id: 'mine', module: file }).evalMetrics).toEqual({ solved: { reward: 'right', min: 1 } });
  expect(await main(['check', config(file), '--offline'])).toBe(EXIT.ok);
});

test('a module path that does not exist', async () => {
  const code = await main(['check', config(path.join(dir, 'missing.js')), '--offline']);
  expect(code).toBe(EXIT.invalidInput);
  expect(err.join('\n')).toMatch(/missing\.js[\s\S]*cannot find/);
});

test('openRun refuses a broken module before any rollout, naming it (non-retryable)', async () => {
  const file = envModule('openrun-bad', envBody({ rubric: `[{ name: 'r', weight: 1, fn: () => undefined }]` }));
  const acts = createConfigActivities({ store: new LocalArtifactStore(mkdtempSync(path.join(tmpdir(), 'ratchet-art-'))), logger: componentLogger('test') });
  await expect(acts.openRun({ configPath: config(file), runId: 'r1' })).rejects.toMatchObject({
    type: 'EnvironmentError', nonRetryable: true, message: expect.stringMatching(/openrun-bad\.js[\s\S]*reward "r" returned a undefined/),
  });
});
