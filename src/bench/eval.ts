/**
 * bench:eval — eval throughput (episodes per minute) on the running CPU stack.
 * Two EvalSweeps of a run's newest policy version over the same first N held-out
 * tasks × k samples, one after the other in this bench run: one rollout at a time
 * (the baseline), then `--concurrency` at once, which is what vLLM's batching
 * and the sandbox pool buy. Each sweep's rate is the one EvalSweep itself
 * recorded (episodes / sweep wall time).
 *
 * Needs `ratchet up` (Temporal, vLLM, workers) and a run with a stored config and
 * at least one saved policy version. Writes its table into BENCHMARKS.md.
 *   npm run build && npm run bench:eval -- --run <id> [--tasks 6] [--k 2] [--concurrency 4] [--taskset heldout]
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LocalArtifactStore } from '../artifacts/store';
import { connectClient } from '../cli/temporal';
import { resolveTaskset } from '../evals/tasksets';
import { TASK_QUEUES } from '../shared/paths';
import { writeTaskSubset } from '../tasks/subset';
import type { EvalSweepResult } from '../contracts/eval';
import { machineLine, writeBenchSection } from './benchmarksFile';

const arg = (name: string, fallback?: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};

interface Measured {
  concurrency: number;
  version: number;
  episodes: number;
  errors: number;
  perMinute: number;
  wallS: number;
  reward: number;
  toolCalls: number;
  tokens: number;
}

/** The first `n` rows of a task set, in a temp file. */
function taskSubset(taskset: string, n: number): string {
  const { file } = resolveTaskset(taskset);
  const out = path.join(mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-eval-')), `${path.basename(file, '.jsonl')}-first${n}.jsonl`);
  const written = writeTaskSubset(file, n, out);
  if (written < n) throw new Error(`task set ${file} has ${written} rows; --tasks asked for ${n}`);
  return out;
}

async function sweep(run: string, taskset: string, k: number, concurrency: number): Promise<Measured> {
  const { client, close } = await connectClient();
  try {
    const t0 = performance.now();
    process.stderr.write(`EvalSweep of ${run}, ${concurrency} rollout(s) at a time...\n`);
    const res = await client.workflow.execute('EvalSweep', {
      taskQueue: TASK_QUEUES.main, workflowId: `bench-eval-${run}-c${concurrency}-${Date.now().toString(36)}`,
      args: [{ runId: run, newest: 1, taskset, k, force: true, maxConcurrent: concurrency }],
    }) as EvalSweepResult;
    const wallS = (performance.now() - t0) / 1000;
    const s = res.evaluated[0];
    if (!s) throw new Error(`EvalSweep evaluated no version of run ${run}. Fix: train the run until it saves a policy version`);
    const r = JSON.parse(readFileSync(new LocalArtifactStore().localPath(s.key), 'utf8')) as {
      episodes: number; errors: number; episodes_per_minute: number; reward: { mean: number }; per_episode: { tool_calls: number; tokens: number };
    };
    return { concurrency, version: s.version, episodes: r.episodes, errors: r.errors, perMinute: r.episodes_per_minute, wallS,
      reward: r.reward.mean, toolCalls: r.per_episode.tool_calls, tokens: r.per_episode.tokens };
  } finally {
    await close();
  }
}

async function main(): Promise<void> {
  const run = arg('run');
  if (!run) throw new Error('usage: npm run bench:eval -- --run <id> [--tasks 6] [--k 2] [--concurrency 4] [--taskset heldout]');
  const nTasks = Number(arg('tasks', '6'));
  const k = Number(arg('k', '2'));
  const concurrency = Number(arg('concurrency', '4'));
  const tasksetName = arg('taskset', 'heldout')!;
  const subset = taskSubset(tasksetName, nTasks);

  const base = await sweep(run, subset, k, 1);
  const wide = await sweep(run, subset, k, concurrency);
  const row = (m: Measured) => `| ${m.concurrency} | ${m.episodes} | ${m.errors} | ${m.wallS.toFixed(0)} | **${m.perMinute.toFixed(2)}** | ` +
    `${m.reward.toFixed(3)} | ${m.toolCalls.toFixed(1)} | ${m.tokens.toFixed(0)} |`;
  const section = writeBenchSection('eval', [
    '### Eval throughput on the CPU stack',
    '',
    `EvalSweep of run \`${run}\` (policy v${base.version}) over the first ${nTasks} tasks of \`${tasksetName}\` × k=${k}: real`,
    'rollouts (SmolLM2-135M on vLLM CPU, hardened Docker sandboxes, the run\'s env and sampling config), scored and',
    'written to the artifact store. Baseline: one rollout at a time; then the sweep\'s window, in the same bench run.',
    '',
    `Command: \`npm run bench:eval -- --run ${run} --tasks ${nTasks} --k ${k} --concurrency ${concurrency}\` (source \`src/bench/eval.ts\`).`,
    `Machine: ${machineLine()}.`,
    '',
    '| rollouts at once | episodes | errors | sweep wall s | episodes/min | mean reward | tool calls/episode | tokens/episode |',
    '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    row(base),
    row(wide),
    '',
    `Ratio ${concurrency} at once / 1 at once: ${(wide.perMinute / Math.max(1e-9, base.perMinute)).toFixed(2)}x episodes per minute.`,
  ]);
  process.stdout.write(`${section}\n`);
}

main().catch((err) => { process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`); process.exit(1); });
