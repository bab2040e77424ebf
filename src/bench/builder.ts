/**
 * Sample-builder throughput: `npm run bench:builder`.
 *
 * Makes a realistic step's rollouts: 64 groups x 8 rollouts of multi-turn tool
 * episodes of about 4k tokens each, rendered with the model's own chat template and
 * tokenizer the way vLLM's chat endpoint renders them (SmolLM2's converted directory),
 * saved as trajectory JSON in a LocalArtifactStore. Then times:
 *  - the buildBatch activity end to end (read + sha256 + JSON + schema validation +
 *    splice/mask/advantages + safetensors + manifest write);
 *  - the builder alone on parsed trajectories;
 *  - in the same run, the Python baseline (src/bench/builder_baseline.py in the trainer
 *    virtualenv): Hugging Face tokenizers' apply_chat_template + encode on the same
 *    trajectories, which is what a builder that re-tokenizes text has to do.
 * Prints a markdown block for BENCHMARKS.md.
 *
 * Env: BENCH_GROUPS (64), BENCH_ROLLOUTS (8), BENCH_TOKENS (4096), BENCH_REPEATS (3).
 *
 * BENCH_MEMORY=4096,65536 instead measures buildBatch's peak memory against the number of rollouts
 * (issue 39): short episodes (BENCH_MEMORY_TOKENS, 512) copied into groups of 8, each count built in a
 * fresh process (its max RSS): the activity as it is (plan from the summaries, trajectories read 16
 * ahead), and with BENCH_MEMORY_ALL=1 also the earlier way (every trajectory read and held, then built;
 * only up to BENCH_MEMORY_ALL_MAX rollouts: it holds them all).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { createBatchActivities } from '../activities/buildBatch';
import { runKeys } from '../artifacts/keys';
import { LocalArtifactStore } from '../artifacts/store';
import type { ChatMessage, RolloutSummary, ToolSpec, Trajectory, Turn } from '../contracts/trajectory';
import { buildBatchFromTrajectories, type BuilderConfig } from '../samples/builder';
import { loadModelTokenizer, type ModelTokenizer } from '../samples/tokenizer';
import { paths, REPO_ROOT } from '../shared/paths';
import { mulberry32 } from '../shared/random';

const GROUPS = Number(process.env.BENCH_GROUPS ?? 64);
const ROLLOUTS = Number(process.env.BENCH_ROLLOUTS ?? 8);
const TOKEN_BUDGET = Number(process.env.BENCH_TOKENS ?? 4096);
const REPEATS = Number(process.env.BENCH_REPEATS ?? 3);
const MODEL = process.env.BENCH_MODEL ?? paths.defaultModel();

const TOOLS: ToolSpec[] = [
  { type: 'function', function: { name: 'bash', description: 'Run a read-only shell command in the repository', parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] } } },
  { type: 'function', function: { name: 'result', description: 'Report the files that need to change', parameters: { type: 'object', properties: { files: { type: 'array', items: { type: 'string' } } }, required: ['files'] } } },
];

/** Real code text for tool outputs and replies: TypeScript's own library declarations. */
const CORPUS = readFileSync(path.join(REPO_ROOT, 'node_modules', 'typescript', 'lib', 'lib.dom.d.ts'), 'utf8');
function slice(rand: () => number, chars: number): string {
  const at = Math.floor(rand() * (CORPUS.length - chars));
  // Starts at a non-space: text after the template's "\n" then tokenizes the same alone or in the whole render.
  return CORPUS.slice(at, at + chars).trimStart();
}

/**
 * One episode, as the rollout worker would save it from vLLM: each turn's prompt ids
 * are the server's rendering of the conversation so far (encoded here per rendered
 * delta: the template is prefix-stable and every delta starts at a special token, so
 * this equals encoding the whole render), completion ids end with <|im_end|>.
 */
function episode(tok: ModelTokenizer, g: number, r: number, rand: () => number, budget = TOKEN_BUDGET): Trajectory {
  const messages: ChatMessage[] = [
    { role: 'system', content: 'You are a code search agent. Use bash to explore the repository, then call result with the files to change.' },
    { role: 'user', content: `Issue #${g}: ${slice(rand, 900)}` },
  ];
  let rendered = tok.render(messages, TOOLS, true);
  let ids = tok.encode(rendered);
  const turns: Turn[] = [];
  const nonCanonicalTurn = (g * ROLLOUTS + r) % 16 === 5 ? 1 : -1; // a few episodes sample a non-canonical split mid-way
  for (let k = 0; ids.length < budget && k < 16; k++) {
    const last = ids.length > budget - Math.min(500, budget / 2);
    const reply: ChatMessage = last
      ? { role: 'assistant', content: 'The fix belongs in the DOM typings.', tool_calls: [{ id: `c${k}`, type: 'function', function: { name: 'result', arguments: '{"files": ["lib/lib.dom.d.ts"]}' } }] }
      : { role: 'assistant', content: slice(rand, 250 + Math.floor(rand() * 300)), tool_calls: [{ id: `c${k}`, type: 'function', function: { name: 'bash', arguments: JSON.stringify({ cmd: `rg -n "${slice(rand, 12).replace(/\W/g, '')}" lib` }) } }] };
    const withReply = tok.render([...messages, reply], TOOLS, false);
    const replyText = withReply.slice(rendered.length, withReply.lastIndexOf('<|im_end|>') + '<|im_end|>'.length);
    let completion = tok.encode(replyText);
    if (k === nonCanonicalTurn) {
      const body = replyText.slice(0, -'<|im_end|>'.length);
      completion = [...body.match(/[\s\S]{1,3}/g)!.flatMap((p) => tok.encode(p)), ...tok.encode('<|im_end|>')];
    }
    turns.push({
      prompt_message_count: messages.length, prompt_token_ids: ids, completion_token_ids: completion,
      completion_logprobs: completion.map(() => -rand() * 2), finish_reason: 'tool_calls', policy_version: 0, model_ms: 0, tools_ms: 0,
    });
    messages.push(reply);
    if (last) break;
    messages.push({ role: 'tool', content: slice(rand, 900 + Math.floor(rand() * 900)), tool_call_id: `c${k}` });
    const next = tok.render(messages, TOOLS, true);
    ids = [...ids, ...tok.encode(next.slice(rendered.length))];
    if (g === 0 && JSON.stringify(ids) !== JSON.stringify(tok.encode(next))) {
      throw new Error('delta encoding differs from encoding the whole render: the simulated server would be wrong');
    }
    rendered = next;
  }
  const reward = rand() < 0.5 ? 1 : 0;
  return {
    format: 'ratchet.trajectory/v1', run_id: 'bench', step: 0, env_id: 'swe-grep', task_id: `task-${g}`, group_id: `g${g}`, rollout_index: r,
    model: 'smollm2-135m', tools: TOOLS, messages, turns, stop_reason: 'completed', final: {},
    reward: { total: reward, components: { correct_files: reward, completion_bonus: 0.1 } },
    stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: turns.length, tool_errors: 0, commands: [], tools_used: {} },
    timing: { model_ms: 0, tools_ms: 0, sandbox_ms: 0, total_ms: 0 },
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function main(): Promise<void> {
  const tok = loadModelTokenizer(MODEL);
  const root = mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-builder-'));
  const store = new LocalArtifactStore(root);
  try {
    const tGen = Date.now();
    const rand = mulberry32(1234);
    const trajs: Trajectory[] = [];
    for (let g = 0; g < GROUPS; g++) for (let r = 0; r < ROLLOUTS; r++) trajs.push(episode(tok, g, r, rand));
    const summaries: RolloutSummary[] = [];
    for (const t of trajs) {
      const ref = await store.putJson(runKeys.trajectory('bench', 0, t.group_id, t.rollout_index), t);
      summaries.push({ task_id: t.task_id, group_id: t.group_id, rollout_index: t.rollout_index, trajectory: ref, reward: t.reward!.total,
        components: t.reward!.components, stop_reason: 'completed', policy_version: 0, completion_tokens: 0, tool_calls: 0, model_ms: 0, tools_ms: 0, sandbox_ms: 0 });
    }
    const jsonBytes = summaries.reduce((a, s) => a + s.trajectory.bytes, 0);
    console.error(`generated ${trajs.length} trajectories (${(jsonBytes / 1e6).toFixed(1)} MB JSON) in ${((Date.now() - tGen) / 1000).toFixed(1)} s`);

    const cfg: BuilderConfig = {
      seq_len: 8192, mask_truncated_completions: false, async_level: 0,
      advantage: { kind: 'grpo', std_normalize: true, drop_uniform_groups: false }, non_prefix_policy: 'split', allow_retokenize: false,
    };
    const acts = createBatchActivities({ store, logger: pino({ level: 'silent' }) });
    const activityMs: number[] = [];
    const builderMs: number[] = [];
    let summary;
    for (let i = 0; i < REPEATS; i++) {
      const t0 = process.hrtime.bigint();
      const out = await acts.buildBatch({ runId: 'bench', step: 0, trainerPolicyVersion: 0, trajectories: summaries, orchestrator: cfg, modelPath: MODEL });
      activityMs.push(Number(process.hrtime.bigint() - t0) / 1e6);
      summary = out.summary;
      const t1 = process.hrtime.bigint();
      buildBatchFromTrajectories(trajs.map((t, j) => ({ trajectory: t, label: String(j), sha256: String(j) })), cfg, tok,
        { runId: 'bench', step: 0, trainerPolicyVersion: 0, modelName: 'm' });
      builderMs.push(Number(process.hrtime.bigint() - t1) / 1e6);
    }
    const s = summary!;
    const act = median(activityMs) / 1000;
    const bld = median(builderMs) / 1000;

    const python = path.join(paths.venv('trainer'), 'bin', 'python');
    let baseline: { full_s: number; per_turn_s: number; tokens: number; read_s: number } | undefined;
    try {
      const out = execFileSync(python, [path.join(REPO_ROOT, 'src', 'bench', 'builder_baseline.py'), MODEL, path.join(root, runKeys.rollouts('bench', 0)), String(REPEATS)],
        { encoding: 'utf8', env: { ...process.env, HF_HUB_OFFLINE: '1', TRANSFORMERS_OFFLINE: '1' }, maxBuffer: 1 << 24 });
      baseline = JSON.parse(out.trim().split('\n').pop()!);
    } catch (err) {
      console.error(`Python baseline did not run (${(err as Error).message.split('\n')[0]}); fix: bash infra/trainer-env.sh`);
    }

    const n = trajs.length;
    const row = (name: string, sec: number, tokens: number) =>
      `| ${name} | ${sec.toFixed(3)} | ${Math.round(tokens / sec).toLocaleString('en-US')} | ${Math.round(n / sec).toLocaleString('en-US')} |`;
    const lines = [
      `Batch: ${GROUPS} groups x ${ROLLOUTS} rollouts = ${n} episodes, ${s.tokens.toLocaleString('en-US')} packed tokens ` +
        `(${Math.round(s.tokens / n)} per episode, ${s.trainable_tokens.toLocaleString('en-US')} trainable), ${s.samples} samples ` +
        `(${s.non_prefix_breaks.assistant_retokenized} non-canonical splits), ${(jsonBytes / 1e6).toFixed(1)} MB of trajectory JSON. Median of ${REPEATS}.`,
      '',
      '| what | seconds | tokens/s | episodes/s |',
      '| --- | ---: | ---: | ---: |',
      row('TS buildBatch activity, end to end (read, sha256, JSON, zod, build, write)', act, s.tokens),
      row('TS builder alone (splice, mask, advantages, pack)', bld, s.tokens),
    ];
    if (baseline) {
      lines.push(row('Python HF apply_chat_template + encode, whole conversation', baseline.full_s, baseline.tokens));
      lines.push(row('Python HF apply_chat_template + encode per turn (to find each reply\'s span)', baseline.per_turn_s, baseline.tokens));
      lines.push('', `Ratios (TS activity end to end vs Python tokenization only, JSON reading excluded from Python's time): ` +
        `${(baseline.full_s / act).toFixed(1)}x faster than whole-conversation re-tokenization, ` +
        `${(baseline.per_turn_s / act).toFixed(1)}x faster than per-turn re-tokenization. Python JSON read: ${baseline.read_s.toFixed(2)} s.`);
    }
    lines.push('', `Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, Node ${process.version}, load average ${os.loadavg()[0]!.toFixed(1)} at the end.`);
    console.log(lines.join('\n'));
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

/** One count in a fresh process: prints {rss_mb, batch_mb, tokens, seconds}. */
async function memoryChild(root: string, summariesRef: string, mode: string): Promise<void> {
  const store = new LocalArtifactStore(root);
  const cfg: BuilderConfig = {
    seq_len: 8192, mask_truncated_completions: false, async_level: 0,
    advantage: { kind: 'grpo', std_normalize: true, drop_uniform_groups: false }, non_prefix_policy: 'split', allow_retokenize: false,
  };
  const summaries = JSON.parse(summariesRef) as RolloutSummary['trajectory'];
  const t0 = Date.now();
  let tokens: number;
  let batchBytes: number;
  if (mode === 'all') {
    const tok = loadModelTokenizer(MODEL);
    const listed = await store.getJson(summaries) as RolloutSummary[];
    const inputs = await Promise.all(listed.map(async (x) => ({ trajectory: await store.getJson(x.trajectory) as Trajectory, label: x.trajectory.uri,
      sha256: x.trajectory.sha256, reward: { total: x.reward, components: x.components } })));
    const built = buildBatchFromTrajectories(inputs, cfg, tok, { runId: 'bench', step: 0, trainerPolicyVersion: 0, modelName: 'm' });
    tokens = built.stats.tokens;
    batchBytes = Object.values(built.tensors).reduce((a, t) => a + t.data.byteLength, 0);
  } else {
    const acts = createBatchActivities({ store, logger: pino({ level: 'silent' }) });
    const out = await acts.buildBatch({ runId: 'bench', step: 0, trainerPolicyVersion: 0, summaries, orchestrator: cfg, modelPath: MODEL });
    tokens = out.summary.tokens;
    batchBytes = out.batch.bytes;
  }
  console.log(JSON.stringify({ rss_mb: Math.round(process.resourceUsage().maxRSS / 1024), batch_mb: Math.round(batchBytes / 2 ** 20), tokens, seconds: (Date.now() - t0) / 1000 }));
}

async function memoryMain(counts: number[]): Promise<void> {
  const tok = loadModelTokenizer(MODEL);
  const rand = mulberry32(99);
  const pool: Trajectory[] = [];
  for (let g = 0; g < 16; g++) for (let r = 0; r < 2; r++) pool.push(episode(tok, g, r, rand, Number(process.env.BENCH_MEMORY_TOKENS ?? 512)));
  const rows: string[] = [];
  for (const n of counts) {
    const root = mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-builder-mem-'));
    try {
      const store = new LocalArtifactStore(root);
      const summaries: RolloutSummary[] = [];
      let jsonBytes = 0;
      for (let k = 0; k < n; k++) {
        const g = Math.floor(k / 8);
        const reward = (k * 7919) % 3 === 0 ? 1 : 0;
        const t: Trajectory = { ...pool[k % pool.length]!, task_id: `task-${g}`, group_id: `g${g}`, rollout_index: k % 8,
          reward: { total: reward, components: { correct_files: reward } } };
        const ref = await store.putJson(runKeys.trajectory('bench', 0, t.group_id, t.rollout_index), t);
        jsonBytes += ref.bytes;
        summaries.push({ task_id: t.task_id, group_id: t.group_id, rollout_index: t.rollout_index, trajectory: ref, reward,
          components: t.reward!.components, stop_reason: 'completed', policy_version: 0, completion_tokens: 0, tool_calls: 0, model_ms: 0, tools_ms: 0, sandbox_ms: 0 });
      }
      const ref = await store.putJson(runKeys.rolloutSummaries('bench', 0), summaries);
      for (const mode of process.env.BENCH_MEMORY_ALL === '1' && n <= Number(process.env.BENCH_MEMORY_ALL_MAX ?? Infinity) ? ['stream', 'all'] : ['stream']) {
        const out = JSON.parse(execFileSync(process.execPath, [__filename], {
          encoding: 'utf8', env: { ...process.env, BENCH_MEMORY_CHILD: JSON.stringify({ root, ref: JSON.stringify(ref), mode }) }, maxBuffer: 1 << 24,
        }).trim().split('\n').pop()!) as { rss_mb: number; batch_mb: number; tokens: number; seconds: number };
        rows.push(`| ${n.toLocaleString('en-US')} | ${mode === 'all' ? 'every trajectory held (before)' : 'streamed (buildBatch now)'} | ` +
          `${(jsonBytes / 2 ** 20).toFixed(0)} | ${out.tokens.toLocaleString('en-US')} | ${out.batch_mb} | ${out.rss_mb} | ${out.rss_mb - out.batch_mb} | ${out.seconds.toFixed(1)} |`);
        console.error(rows[rows.length - 1]);
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }
  console.log(['| rollouts | buildBatch | trajectory JSON (MiB) | packed tokens | batch (MiB) | peak RSS (MiB) | peak RSS − batch (MiB) | seconds |',
    '| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |', ...rows,
    '', `Machine: ${os.cpus().length} x ${os.cpus()[0]?.model ?? 'cpu'}, Node ${process.version}.`].join('\n'));
}

const child = process.env.BENCH_MEMORY_CHILD ? JSON.parse(process.env.BENCH_MEMORY_CHILD) as { root: string; ref: string; mode: string } : undefined;
(child ? memoryChild(child.root, child.ref, child.mode)
  : process.env.BENCH_MEMORY ? memoryMain(process.env.BENCH_MEMORY.split(',').map(Number)) : main()).catch((err) => {
  console.error(err);
  process.exit(1);
});
