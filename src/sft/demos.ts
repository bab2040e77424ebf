/**
 * Demonstrations for SFT: the scripted solver's episodes (src/sft/solvers/) run by the
 * rollout activity itself, so each one is a real episode on a real sandbox (the
 * task's repository at its base commit, the environment's tools, its rubric) recorded
 * as a real trajectory. Those that reach `minReward` are kept: the solver's wrong
 * guesses are not imitated.
 *
 * `ratchet demos` (src/cli/demos.ts) writes them as a JSONL file of ratchet.trajectory/v1
 * objects for [sft] data.
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ModelClient } from '../agent/model';
import { createRolloutActivities } from '../activities/rollout';
import { LocalArtifactStore, type ArtifactStore } from '../artifacts/store';
import { RunConfig } from '../config/schema';
import type { RolloutInput } from '../contracts/rollout';
import { Trajectory } from '../contracts/trajectory';
import type { SandboxManager } from '../sandbox/interface';
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
