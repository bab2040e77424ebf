/**
 * Rollouts per minute on this machine at concurrency 1, 4 and 16 (baseline:
 * concurrency 1, same run), with where the time goes: model (vLLM), tools
 * (execs in the sandbox), sandbox (acquire, release, scoring sandbox).
 * Real stack: SmolLM2 on the local vLLM, hardened Docker sandboxes, the first
 * tasks of the generated set.
 *   npm run bench:rollouts [-- --env swe-grep --levels 1,4,16 --turns 3 --tokens 200]
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import pino from 'pino';
import { createRolloutActivities } from '../activities/rollout';
import type { RolloutInput } from '../contracts/rollout';
import { LocalArtifactStore } from '../artifacts/store';
import { RunConfig } from '../config/schema';
import type { RolloutSummary } from '../contracts/trajectory';
import { SandboxManager } from '../sandbox';
import { DEFAULTS, paths } from '../shared/paths';
import { loadTasks } from '../tasks/load';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] ?? fallback : fallback;
}
const envId = arg('env', 'swe-grep');
const levels = arg('levels', '1,4,16').split(',').map(Number);
const maxTurns = Number(arg('turns', '3'));
const maxTokens = Number(arg('tokens', '200'));
const taskFile = arg('tasks', path.join(paths.tasks(), 'train.jsonl'));

interface LevelResult {
  concurrency: number;
  rollouts: number;
  wall_s: number;
  per_min: number;
  speedup: number;
  mean: { total_s: number; model_s: number; tools_s: number; sandbox_s: number };
  turns_mean: number;
  completion_tokens_mean: number;
  errors: number;
}

async function main(): Promise<void> {
  const { tasks } = await loadTasks(taskFile, { onInvalid: 'skip' });
  if (tasks.length === 0) throw new Error(`no tasks in ${taskFile}; generate them first (taskgen) or pass --tasks <file>`);
  const sandbox = RunConfig.parse({ env: [{ id: 'swe-grep' }] }).sandbox;
  const limits = { ...sandbox, warm_pool_size: 0 };
  const sandboxes = new SandboxManager({ log: pino({ level: 'warn' }) });
  const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-rollouts-')));
  const acts = createRolloutActivities({ store, sandboxes });
  const runId = `bench-rollouts-${Date.now()}`;

  const results: LevelResult[] = [];
  for (const concurrency of levels) {
    // At least 4 rollouts, and enough to fill every slot once.
    const n = Math.max(4, concurrency);
    const inputs: RolloutInput[] = Array.from({ length: n }, (_, i) => ({
      runId, step: concurrency, groupId: `c${concurrency}`, rolloutIndex: i, envId,
      task: tasks[i % tasks.length]!, taskSetDir: path.dirname(taskFile),
      policyVersion: 0, modelName: DEFAULTS.servedModel, sampling: { temperature: 1, top_p: 1, max_tokens: 100 },
      envArgs: { max_tokens: maxTokens, max_tool_calls: 5, max_turns: maxTurns }, rubric: {},
      sandbox: limits, inferenceBaseUrl: DEFAULTS.inferenceUrl, seed: i,
    }));
    const summaries: RolloutSummary[] = [];
    let errors = 0;
    let next = 0;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: concurrency }, async () => {
      while (next < inputs.length) {
        const input = inputs[next++]!;
        const started = performance.now();
        try {
          const s = await acts.rollout(input);
          summaries.push({ ...s, total: performance.now() - started } as RolloutSummary & { total: number });
        } catch (err) {
          errors += 1;
          console.error(`rollout failed: ${(err as Error).message}`);
        }
      }
    }));
    const wall = (performance.now() - t0) / 1000;
    const mean = (f: (s: RolloutSummary & { total: number }) => number) =>
      summaries.length === 0 ? 0 : summaries.reduce((a, s) => a + f(s as RolloutSummary & { total: number }), 0) / summaries.length;
    const perMin = (summaries.length / wall) * 60;
    const turns = await Promise.all(summaries.map(async (s) => ((await store.getJson(s.trajectory)) as { turns: unknown[] }).turns.length));
    results.push({
      concurrency, rollouts: summaries.length, wall_s: +wall.toFixed(1), per_min: +perMin.toFixed(2),
      speedup: results[0] ? +(perMin / results[0].per_min).toFixed(2) : 1,
      mean: {
        total_s: +(mean((s) => s.total) / 1000).toFixed(2),
        model_s: +(mean((s) => s.model_ms) / 1000).toFixed(2),
        tools_s: +(mean((s) => s.tools_ms) / 1000).toFixed(2),
        sandbox_s: +(mean((s) => s.sandbox_ms) / 1000).toFixed(2),
      },
      turns_mean: +(turns.reduce((a, b) => a + b, 0) / Math.max(1, turns.length)).toFixed(2),
      completion_tokens_mean: +mean((s) => s.completion_tokens).toFixed(1),
      errors,
    });
    console.error(`concurrency ${concurrency}: ${summaries.length} rollouts in ${wall.toFixed(1)} s`);
  }
  await sandboxes.close();

  console.log(`\nRollouts: env ${envId}, max_turns ${maxTurns}, max_tokens ${maxTokens}, ${os.cpus().length} CPUs, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}\n`);
  console.log('| concurrency | rollouts | wall s | rollouts/min | vs c=1 | mean rollout s | model s | tools s | sandbox s | turns | completion tokens | errors |');
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const r of results) {
    console.log(`| ${r.concurrency} | ${r.rollouts} | ${r.wall_s} | ${r.per_min} | ${r.speedup}x | ${r.mean.total_s} | ${r.mean.model_s} | ${r.mean.tools_s} | ${r.mean.sandbox_s} | ${r.turns_mean} | ${r.completion_tokens_mean} | ${r.errors} |`);
  }
  console.log(`\n${JSON.stringify({ env: envId, results })}`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
