/**
 * Demonstrations for SFT: the scripted solver's episodes (src/sft/solvers/) run by the
 * rollout activity itself, so each one is a real episode on a real sandbox (the
 * task's repository at its base commit, the environment's tools, its rubric) recorded
 * as a real trajectory. Those that reach `minReward` are kept: the solver's wrong
 * guesses are not imitated.
 *
 *   npm run sft:demos -- --tasks .ratchet/tasks/train.jsonl --out demos.jsonl [--env swe-grep|debug|code-repair] [--limit 24] [--min-reward 1]
 *
 * The output is a JSONL file of ratchet.trajectory/v1 objects for [sft] data.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import type { ModelClient } from '../agent/model';
import { createRolloutActivities } from '../activities/rollout';
import { LocalArtifactStore, type ArtifactStore } from '../artifacts/store';
import { RunConfig } from '../config/schema';
import type { RolloutInput } from '../contracts/rollout';
import { Trajectory } from '../contracts/trajectory';
import type { SandboxManager } from '../envs/sandbox';
import type { Task } from '../tasks/schema';
import { codeRepairSolver } from './solvers/codeRepair';
import { debugSolver } from './solvers/debug';
import { GoldPatchError } from './solvers/goldPatch';
import { sweGrepSolver } from './solvers/sweGrep';
import { successful } from './trajectories';

/** The environments with a scripted solver. */
export const SOLVERS: Record<string, (task: Task) => ModelClient> = {
  'swe-grep': sweGrepSolver,
  // The steps the gold patch implies, made with each environment's own edit tools.
  debug: debugSolver,
  'code-repair': codeRepairSolver,
};

export interface DemoOptions {
  envId: string;
  tasks: Task[];
  taskSetDir: string;
  sandboxes: SandboxManager;
  store?: ArtifactStore;
  minReward: number;
  /** Episode limits: the demonstrations must fit the limits the policy will train under. */
  envArgs?: { max_tokens: number; max_tool_calls: number; max_turns: number };
  concurrency?: number;
  /** A solver other than the environment's own in SOLVERS (bench:learn's path-only swe-grep procedure). */
  solver?: (task: Task) => ModelClient;
}

export interface DemoResult {
  kept: Trajectory[];
  all: Trajectory[];
  /** Tasks the solver cannot replay (a gold patch that creates, deletes or renames a file), with why. */
  skipped: { instance_id: string; reason: string }[];
}

export async function makeDemonstrations(o: DemoOptions): Promise<DemoResult> {
  const solver = o.solver ?? SOLVERS[o.envId];
  if (!solver) throw new Error(`no scripted solver for environment "${o.envId}" (have: ${Object.keys(SOLVERS).join(', ')})`);
  const store = o.store ?? new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-demos-')));
  // One solver per task: the rollout activity asks for a client by base URL, and each task gets its own.
  const byUrl = new Map<string, ModelClient>();
  const acts = createRolloutActivities({ store, sandboxes: o.sandboxes, openaiFactory: (url) => byUrl.get(url)! });
  const sandbox = { ...RunConfig.parse({ env: [{ id: o.envId }] }).sandbox, warm_pool_size: 0 };
  const all: (Trajectory | undefined)[] = new Array<Trajectory | undefined>(o.tasks.length);
  const skipped: DemoResult['skipped'] = [];
  let next = 0;
  const worker = async () => {
    for (;;) {
      const i = next++;
      if (i >= o.tasks.length) return;
      const task = o.tasks[i]!;
      const url = `http://scripted-solver.invalid/${i}`;
      try {
        byUrl.set(url, solver(task));
      } catch (err) {
        if (!(err instanceof GoldPatchError)) throw err;
        skipped.push({ instance_id: task.instance_id, reason: err.message });
        continue;
      }
      const input: RolloutInput = {
        runId: 'sft-demos', step: 0, groupId: `demo-${i}`, rolloutIndex: 0, envId: o.envId, task, taskSetDir: o.taskSetDir,
        policyVersion: 0, modelName: `scripted-${o.envId}`, sampling: { temperature: 1, top_p: 1, max_tokens: 256, tool_choice: 'auto' },
        envArgs: o.envArgs ?? { max_tokens: 4096, max_tool_calls: 8, max_turns: 8 }, rubric: {}, sandbox, inferenceBaseUrl: url,
      };
      const summary = await acts.rollout(input);
      all[i] = Trajectory.parse(JSON.parse((await store.get(summary.trajectory)).toString('utf8')));
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, o.concurrency ?? 2) }, worker));
  const ran = all.filter((t): t is Trajectory => t !== undefined);
  return { kept: successful(ran, o.minReward), all: ran, skipped };
}

async function main(): Promise<void> {
  const arg = (name: string): string | undefined => {
    const i = process.argv.indexOf(`--${name}`);
    return i >= 0 ? process.argv[i + 1] : undefined;
  };
  const taskFile = arg('tasks') ?? '.ratchet/tasks/train.jsonl';
  const out = arg('out') ?? 'demos.jsonl';
  const limit = Number(arg('limit') ?? '1000000');
  const minReward = Number(arg('min-reward') ?? '1');
  const envId = arg('env') ?? 'swe-grep';
  const { loadTasks } = await import('../tasks/load');
  const { SandboxManager } = await import('../sandbox/manager');
  const tasks = (await loadTasks(taskFile, { onInvalid: 'skip' })).tasks.slice(0, limit);
  const sandboxes = new SandboxManager({ log: pino({ level: 'warn' }) });
  const { kept, all, skipped } = await makeDemonstrations({ envId, tasks, taskSetDir: path.dirname(taskFile), sandboxes, minReward, concurrency: 2 });
  writeFileSync(out, kept.map((t) => JSON.stringify(t)).join('\n') + (kept.length ? '\n' : ''));
  const rewards = all.map((t) => t.reward?.total ?? 0);
  process.stdout.write(`${kept.length} of ${all.length} demonstrations reached reward ${minReward} -> ${out} ` +
    `(mean reward ${(rewards.reduce((a, b) => a + b, 0) / Math.max(1, rewards.length)).toFixed(3)})` +
    `${skipped.length ? `; ${skipped.length} task(s) skipped: the solver cannot replay their gold patch (first: ${skipped[0]!.instance_id}: ${skipped[0]!.reason})` : ''}\n`);
  await sandboxes.close();
}

if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}
