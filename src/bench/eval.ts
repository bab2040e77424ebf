/**
 * Eval throughput (episodes per minute) on the running stack: starts one EvalSweep
 * of a run's newest version on the held-out set and reads the rate the sweep
 * recorded. Needs `ratchet up` with workers that register EvalSweep and the eval
 * activities, and a run with a stored config.
 *   npm run build && npm run bench:eval -- --run <id> [--k 2] [--taskset heldout] [--concurrency 4]
 */
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { LocalArtifactStore } from '../artifacts/store';
import { connectClient } from '../cli/temporal';
import { TASK_QUEUES } from '../shared/paths';
import type { EvalSweepResult } from '../workflows/evalSweep';

const arg = (name: string, fallback?: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
};

async function main(): Promise<void> {
  const run = arg('run');
  if (!run) throw new Error('usage: bench:eval -- --run <id> [--k 2] [--taskset heldout] [--concurrency 4]');
  const { client, close } = await connectClient();
  try {
    const t0 = Date.now();
    const res = await client.workflow.execute('EvalSweep', {
      taskQueue: TASK_QUEUES.main, workflowId: `bench-eval-${run}-${t0.toString(36)}`,
      args: [{ runId: run, newest: 1, taskset: arg('taskset', 'heldout'), k: Number(arg('k', '2')), force: true, maxConcurrent: Number(arg('concurrency', '4')) }],
    }) as EvalSweepResult;
    const store = new LocalArtifactStore();
    for (const s of res.evaluated) {
      const r = JSON.parse(readFileSync(store.localPath(s.key), 'utf8')) as { episodes: number; episodes_per_minute: number; errors: number };
      console.log(JSON.stringify({ bench: 'eval', run, version: s.version, episodes: r.episodes, errors: r.errors,
        episodes_per_minute: +r.episodes_per_minute.toFixed(2), wall_s: (Date.now() - t0) / 1000, cores: cpus().length, cpu: cpus()[0]?.model }));
    }
  } finally {
    await close();
  }
}

main().catch((err) => { console.error(err); process.exit(1); });
