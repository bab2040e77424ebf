/**
 * The bad-input suite of `ratchet check`: one test per bound and per
 * cross-check, each run through the CLI as a user would, each asserting the
 * exit code and that the message names the field. Offline (no stack needed):
 * the model is the Qwen3 tokenizer that ships in node_modules.
 */
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { stringify } from 'smol-toml';
import { main } from '../../../src/cli/index';
import { EXIT } from '../../../src/cli/exit';
import { QWEN3_DIR } from '../../fixtures/samples/simulate';

type Obj = Record<string, unknown>;

jest.setTimeout(60_000);

const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-check-'));
mkdirSync(path.join(dir, 'repos', 'calc.git'), { recursive: true });

const task = (over: Obj = {}): Obj => ({
  instance_id: 'calc-1', repo: 'example/calc', base_commit: 'abc123', problem_statement: 'add() subtracts.',
  patch: 'diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1 +1 @@\n-a - b\n+a + b\n',
  FAIL_TO_PASS: ['tests/test_ops.py::test_add'], source: { type: 'snapshot', repo_path: 'repos/calc.git' }, ...over,
});

function dataset(name: string, rows: (Obj | string)[]): string {
  const file = path.join(dir, name);
  writeFileSync(file, rows.map((r) => (typeof r === 'string' ? r : JSON.stringify(r))).join('\n') + '\n');
  return file;
}

const goodData = dataset('good.jsonl', [task(), task({ instance_id: 'calc-2' })]);

function baseConfig(): Obj {
  return {
    model: { path: QWEN3_DIR },
    orchestrator: { seq_len: 2048, non_prefix_policy: 'split' },
    sampling: { max_tokens: 128 },
    env: [{ id: 'swe-grep', dataset: goodData }],
  };
}

function setKey(obj: Obj, key: string, value: unknown): Obj {
  const parts = key.split('.');
  let cur: Obj | unknown[] = obj;
  for (const [i, p] of parts.entries()) {
    const last = i === parts.length - 1;
    const k = Array.isArray(cur) ? Number(p) : p;
    if (last) {
      (cur as Obj)[k as string] = value;
    } else {
      (cur as Obj)[k as string] ??= {};
      cur = (cur as Obj)[k as string] as Obj;
    }
  }
  return obj;
}

let n = 0;
function writeConfig(cfg: Obj): string {
  const file = path.join(dir, `c${n++}.toml`);
  writeFileSync(file, stringify(cfg));
  return file;
}

let out: string[];
let err: string[];
beforeEach(() => {
  out = []; err = [];
  jest.spyOn(console, 'log').mockImplementation((...a) => { out.push(a.join(' ')); });
  jest.spyOn(console, 'error').mockImplementation((...a) => { err.push(a.join(' ')); });
  process.exitCode = undefined;
});
afterEach(() => { jest.restoreAllMocks(); process.exitCode = undefined; });

async function check(cfg: Obj): Promise<{ code: number; text: string; failed: string }> {
  const code = await main(['check', writeConfig(cfg), '--offline']);
  const text = [...out, ...err].join('\n');
  const failed = err.join('\n').replace(/\x1b\[[0-9;]*m/g, '');
  return { code, text, failed };
}

test('a good config passes (warnings allowed), so every failure below is the one change it makes', async () => {
  const r = await check(baseConfig());
  expect(r.failed).toBe('');
  expect(r.code).toBe(EXIT.ok);
  expect(r.text).toContain('ready to train');
});

/** [key, a value below its range, a value above it]; null where the side has no bound to cross. */
const BOUNDS: [string, number | null, number | null][] = [
  ['trainer.lora.rank', 0, 5000],
  ['trainer.lora.alpha', 0, 1e6],
  ['trainer.lora.dropout', -0.1, 1],
  ['trainer.optim.lr', -1e-5, 2], // 0 is a control run (bench:learn)
  ['trainer.optim.weight_decay', -1, 2],
  ['trainer.optim.eps', 0, 2],
  ['trainer.optim.max_grad_norm', 0, 1e7],
  ['trainer.ac.freq', -1, 2000],
  ['trainer.loss.eps_low', -0.1, 1.5],
  ['trainer.loss.eps_high', -0.1, 11],
  ['trainer.loss.kl_coef', -1, 101],
  ['trainer.loss.tis_cap', 0.5, 2000],
  ['trainer.loss.mask_threshold', 0, 1000],
  ['trainer.loss.dual_clip', 0.5, 2000],
  ['trainer.loss.max_tokens', 0, 200_000],
  ['trainer.loss.mismatch_tolerance', -1, 101],
  ['trainer.loss.icepop_low', 0, 1.5],
  ['trainer.loss.icepop_high', 0.5, 2000],
  ['trainer.minibatches', 0, 2000],
  ['trainer.epochs', 0, 101],
  ['trainer.micro_batch_tokens', 0, 1e9],
  ['trainer.logprob_chunk_tokens', -1, 1e9],
  ['trainer.seed', -1, 2 ** 32],
  ['inference.request_timeout_s', 0, 1e10],
  ['inference.sync_quorum', 0, 2000],
  ['sampling.temperature', -0.1, 11],
  ['sampling.top_p', 0, 1.5],
  ['sampling.max_tokens', 0, 200_000],
  ['orchestrator.batch_size', 0, 20_000],
  ['orchestrator.rollouts_per_example', 0, 2000],
  ['orchestrator.seq_len', 63, 200_000],
  ['orchestrator.max_steps', 0, 2e6],
  ['orchestrator.async_level', -1, 9],
  ['orchestrator.max_concurrent_rollouts', 0, 65_537],
  ['orchestrator.rollouts_per_chunk', -1, 65],
  ['orchestrator.chunks_per_shard', 0, 1001],
  ['orchestrator.fairness_weight', 0.001, 1000],
  ['orchestrator.continue_as_new_every', 0, 1001],
  ['orchestrator.seed', -1, 2 ** 32],
  ['env.0.weight', 0, 1e7],
  ['env.0.args.max_tokens', 0, 200_000],
  ['env.0.args.max_tool_calls', 0, 1001],
  ['env.0.args.max_turns', 0, 1001],
  ['env.0.rubric.correct_files', -1e7, 1e7],
  ['sandbox.memory_mb', 63, 2e6],
  ['sandbox.cpus', 0, 2000],
  ['sandbox.pids_limit', 15, 40_000],
  ['sandbox.disk_mb', 15, 2e6],
  ['sandbox.exec_timeout_s', 0, 1e7],
  ['sandbox.output_limit_bytes', 255, 1e9],
  ['sandbox.warm_pool_size', -1, 65],
  ['eval.every_steps', -1, 2e6],
  ['eval.k', 0, 65],
  ['eval.max_concurrent', 0, 1001],
];

describe('bounds: every numeric setting', () => {
  const cases = BOUNDS.flatMap(([key, lo, hi]) => [
    ...(lo === null ? [] : [[key, 'below', lo] as const]),
    ...(hi === null ? [] : [[key, 'above', hi] as const]),
  ]);
  test.each(cases)('%s %s its range (%p) is refused, naming the key', async (key, _side, value) => {
    const r = await check(setKey(baseConfig(), key, value));
    expect(r.code).toBe(EXIT.invalidInput);
    expect(r.failed).toContain(`: ${key}: `);
  });
});

describe('cross-checks: settings that depend on each other', () => {
  test('sampling.max_tokens must leave room in orchestrator.seq_len', async () => {
    const r = await check(setKey(setKey(baseConfig(), 'sampling.max_tokens', 2048), 'orchestrator.seq_len', 2048));
    expect(r.code).toBe(EXIT.invalidInput);
    expect(r.failed).toMatch(/sampling\.max_tokens: .*orchestrator\.seq_len/);
  });
  test('one rollout per task has no advantage', async () => {
    const r = await check(setKey(baseConfig(), 'orchestrator.rollouts_per_example', 1));
    expect(r.failed).toMatch(/orchestrator\.rollouts_per_example: .*no baseline/);
  });
  test('a model request may not outlive its rollout', async () => {
    const r = await check(setKey(baseConfig(), 'inference.request_timeout_s', 3600));
    expect(r.failed).toMatch(/inference\.request_timeout_s: .*1800 s/);
  });
  test('a weight-sync quorum above the replica count can never be reached', async () => {
    const r = await check(setKey(setKey(baseConfig(), 'inference.base_urls', ['http://127.0.0.1:8000/v1', 'http://127.0.0.1:8001/v1']), 'inference.sync_quorum', 3));
    expect(r.code).toBe(EXIT.invalidInput);
    expect(r.failed).toMatch(/inference\.sync_quorum: 3 replicas .* 2 replicas \(inference\.base_urls\).*Fix: set inference\.sync_quorum to at most 2/);
  });
  test('a weight-sync quorum counts inference hosts when sync_task_queues is set', async () => {
    const r = await check(setKey(setKey(baseConfig(), 'inference.sync_task_queues', ['ratchet-inference-a']), 'inference.sync_quorum', 2));
    expect(r.failed).toMatch(/inference\.sync_quorum: .*1 inference hosts/);
  });
  test('tool calls x exec timeout must fit in a rollout', async () => {
    const r = await check(setKey(setKey(baseConfig(), 'env.0.args.max_tool_calls', 100), 'sandbox.exec_timeout_s', 60));
    expect(r.failed).toMatch(/env\.0\.args\.max_tool_calls: .*sandbox\.exec_timeout_s/);
  });
  test('more turns than completion tokens cannot happen', async () => {
    const r = await check(setKey(setKey(baseConfig(), 'env.0.args.max_turns', 20), 'env.0.args.max_tokens', 10));
    expect(r.failed).toMatch(/env\.0\.args\.max_turns: .*env\.args\.max_tokens/);
  });
  test('the same environment and dataset twice', async () => {
    const cfg = baseConfig();
    cfg.env = [{ id: 'swe-grep', dataset: goodData }, { id: 'swe-grep', dataset: goodData }];
    const r = await check(cfg);
    expect(r.failed).toMatch(/env\.1: same environment and dataset as env\.0/);
  });
  test('an unknown environment id without a module', async () => {
    const r = await check(setKey(baseConfig(), 'env.0.id', 'chess'));
    expect(r.failed).toMatch(/env\.0\.id: unknown environment "chess".*env\.module/);
  });
  test('a rubric weight for a reward the environment does not have', async () => {
    const r = await check(setKey(baseConfig(), 'env.0.rubric.nonsense', 1));
    expect(r.failed).toMatch(/env\.0\.rubric names "nonsense"/);
  });
});

describe('against the host, the model and the data', () => {
  test('sandbox.cpus above what Docker has on this host', async () => {
    const r = await check(setKey(baseConfig(), 'sandbox.cpus', 1000));
    expect(r.code).toBe(EXIT.invalidInput);
    expect(r.failed).toMatch(/sandbox\.cpus = 1000: Docker refuses more CPUs than the host has/);
  });
  test('sandbox.memory_mb above the host memory', async () => {
    const r = await check(setKey(baseConfig(), 'sandbox.memory_mb', 1_000_000));
    expect(r.failed).toMatch(/sandbox\.memory_mb = 1000000: more than the host's memory/);
  });
  test('orchestrator.seq_len shorter than the longest prompt', async () => {
    const long = dataset('long.jsonl', [task(), task({ instance_id: 'calc-long', problem_statement: 'word '.repeat(400) })]);
    const cfg = setKey(setKey(setKey(baseConfig(), 'env.0.dataset', long), 'orchestrator.seq_len', 400), 'sampling.max_tokens', 64);
    const r = await check(cfg);
    expect(r.failed).toMatch(/orchestrator\.seq_len = 400 is shorter than env\.0 \("swe-grep"\)'s longest prompt, task "calc-long"/);
  });
  test('orchestrator.seq_len longer than the model context', async () => {
    const model = path.join(dir, 'model-1k');
    mkdirSync(model, { recursive: true });
    for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(path.join(QWEN3_DIR, f), path.join(model, f));
    writeFileSync(path.join(model, 'config.json'), JSON.stringify({ vocab_size: 151_936, max_position_embeddings: 1024 }));
    const r = await check(setKey(baseConfig(), 'model.path', model));
    expect(r.failed).toMatch(/orchestrator\.seq_len = 2048 is longer than the model's context \(max_position_embeddings 1024/);
  });
  test('model.path without a tokenizer', async () => {
    const r = await check(setKey(baseConfig(), 'model.path', dir));
    expect(r.failed).toMatch(/model\.path: .*has no tokenizer\.json/);
  });
  test('non_prefix_policy "fail" with a template that rewrites earlier turns (Qwen3)', async () => {
    const r = await check(setKey(baseConfig(), 'orchestrator.non_prefix_policy', 'fail'));
    expect(r.failed).toMatch(/orchestrator\.non_prefix_policy = "fail", but the chat template rewrites earlier turns/);
  });
  test('a dataset that does not exist', async () => {
    const r = await check(setKey(baseConfig(), 'env.0.dataset', path.join(dir, 'nope.jsonl')));
    expect(r.failed).toMatch(/env\.0\.dataset: .*nope\.jsonl does not exist/);
  });
  test.each([
    ['a duplicate instance id', [task(), task()], /:2: field "instance_id": duplicate of row 1/],
    ['a missing required field', [task({ FAIL_TO_PASS: undefined })], /field "FAIL_TO_PASS": Required/],
    ['a problem statement over the size limit', [task({ problem_statement: 'x'.repeat(100_001) })], /field "problem_statement": is longer than 100000 characters/],
    ['a gold patch that leaves the repository', [task({ patch: 'diff --git a/../../etc/passwd b/../../etc/passwd\n' })], /field "patch": path "\.\.\/\.\.\/etc\/passwd" contains "\.\."/],
    ['an absolute gold file', [task({ gold_files: ['/etc/shadow'] })], /field "gold_files": path "\/etc\/shadow" is absolute/],
    ['a row that is not JSON', ['{"instance_id": '], /field "\(row\)": not valid JSON/],
    ['a task with no repository', [task({ source: undefined })], /task "calc-1": no source; "swe-grep" needs a repository/],
  ])('dataset: %s is refused, naming the row and field', async (_name, rows, message) => {
    const file = dataset(`bad-${n}.jsonl`, rows as (Obj | string)[]);
    const r = await check(setKey(baseConfig(), 'env.0.dataset', file));
    expect(r.code).toBe(EXIT.invalidInput);
    expect(r.failed).toMatch(/env\.0\.dataset: /);
    expect(r.failed).toMatch(message);
  });
});

test('a prefix-stable template (configs/templates/smollm2-tools.jinja) passes the prefix check that Qwen3 fails', async () => {
  const model = path.join(dir, 'model-stable');
  mkdirSync(model, { recursive: true });
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(path.join(QWEN3_DIR, f), path.join(model, f));
  copyFileSync(path.join(__dirname, '..', '..', '..', 'configs', 'templates', 'smollm2-tools.jinja'), path.join(model, 'chat_template.jinja'));
  const r = await check(setKey(setKey(baseConfig(), 'model.path', model), 'orchestrator.non_prefix_policy', 'fail'));
  expect(r.failed).toBe('');
  expect(r.text).toContain('chat template keeps multi-turn prefixes');
});

describe('[sft] (ratchet sft)', () => {
  test('a data file that does not exist', async () => {
    const r = await check({ ...baseConfig(), sft: { data: [path.join(dir, 'nope.jsonl')] } });
    expect(r.code).toBe(EXIT.invalidInput);
    expect(r.failed).toMatch(/sft\.data\.0: cannot read .*nope\.jsonl.*Fix: make demonstrations/);
  });

  test('a bad line is named by file and line', async () => {
    const file = dataset('sft-bad.jsonl', ['{"format": "ratchet.trajectory/v1"}']);
    const r = await check({ ...baseConfig(), sft: { data: [file] } });
    expect(r.code).toBe(EXIT.invalidInput);
    expect(r.failed).toContain(`sft.data.0: ${file}:1: field `);
  });

  test('trainer.loss.kind = "sft" in a run config (SftRun sets it itself)', async () => {
    const r = await check(setKey(baseConfig(), 'trainer.loss.kind', 'sft'));
    expect(r.code).toBe(EXIT.invalidInput);
    expect(r.failed).toMatch(/trainer\.loss\.kind: "sft" is set by an SftRun itself/);
  });
});

describe('[eval] (the in-run eval cadence)', () => {
  const withEval = (e: Obj, over: Obj = {}): Obj => ({ ...baseConfig(), ...over, eval: e });

  test('a held-out task set that does not exist', async () => {
    const r = await check(withEval({ every_steps: 2, taskset: path.join(dir, 'nope-heldout.jsonl') }));
    expect(r.code).toBe(EXIT.invalidInput);
    expect(r.failed).toMatch(/eval\.taskset: task set ".*nope-heldout\.jsonl" not found.*Fix: .*set eval\.taskset to .*eval\.every_steps = 2/);
  });

  test('a held-out task set with a bad row names the key, the file and the row', async () => {
    const file = dataset('heldout-bad.jsonl', [task(), task()]);
    const r = await check(withEval({ every_steps: 2, taskset: file }));
    expect(r.code).toBe(EXIT.invalidInput);
    expect(r.failed).toMatch(/eval\.taskset: task set .*heldout-bad\.jsonl failed validation/);
    expect(r.failed).toMatch(/duplicate of row 1/);
  });

  test('tasks x k over the per-version episode limit names eval.k', async () => {
    const file = dataset('heldout-big.jsonl', Array.from({ length: 40 }, (_, i) => task({ instance_id: `calc-${i}` })));
    const r = await check(withEval({ every_steps: 2, taskset: file, k: 64 }));
    expect(r.code).toBe(EXIT.invalidInput);
    expect(r.failed).toMatch(/eval\.k: 40 tasks .* x k = 64 = 2560 episodes per sweep, over 2000/);
  });

  test('a good task set passes; a cadence longer than the run warns; a cadence of 0 checks nothing', async () => {
    const file = dataset('heldout-good.jsonl', [task(), task({ instance_id: 'calc-2' })]);
    const good = await check(withEval({ every_steps: 2, taskset: file, k: 2 }));
    expect(good.failed).toBe('');
    expect(good.text).toMatch(/ eval +eval\.every_steps = 2: a sweep of 2 tasks .*heldout-good\.jsonl\) x k = 2 after every 2 steps/);
    out = []; err = [];
    const long = await check(withEval({ every_steps: 10, taskset: file }));
    expect(long.failed).toBe('');
    expect(long.text).toMatch(/eval\.every_steps: 10 is more than orchestrator\.max_steps = 3, so no sweep runs/);
    out = []; err = [];
    const off = await check(withEval({ every_steps: 0, taskset: path.join(dir, 'nope-heldout.jsonl') }));
    expect(off.failed).toBe('');
    expect(off.text).not.toMatch(/ eval +eval\./);
  });
});
