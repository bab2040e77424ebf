/**
 * EvalSweep over real rollouts: the real plan, rollout and record activities on a
 * Temporal dev server, SmolLM2-135M on vLLM, hardened Docker sandboxes, two tasks
 * from the generated held-out set (or taskgen's fixtures). Policy v0 (the base
 * model) needs no adapter. The point is the plumbing end to end, not the score:
 * the schema of what the sweep sends the rollout activity, where the episodes are
 * stored, and the result file.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import Docker from 'dockerode';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { createEvalActivities } from '../../src/activities/eval';
import { createRolloutActivities } from '../../src/activities/rollout';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { RunConfig } from '../../src/config/schema';
import { EvalResult } from '../../src/contracts/eval';
import { Trajectory } from '../../src/contracts/trajectory';
import { SandboxManager } from '../../src/sandbox';
import { writeTaskSubset } from '../../src/tasks/subset';
import { logger } from '../../src/shared/logger';
import { EVAL_STEP } from '../../src/shared/steps';
import type { EvalSweepResult } from '../../src/contracts/eval';
import { describeWithStack, REPO, STATE, TEMPORAL_BIN } from '../helpers/stack';

const SOURCES = [path.join(STATE, 'tasks', 'heldout.jsonl'), path.join(REPO, 'taskgen', 'fixtures', 'sample_tasks.jsonl')];
const source = SOURCES.find((f) => existsSync(f));
if (!source) {
  const msg = 'real EvalSweep test: no task set in .ratchet/tasks or taskgen/fixtures. Fix: bash infra/taskgen.sh';
  if (process.env.RATCHET_REQUIRE_STACK === '1') throw new Error(msg);
  console.warn(`SKIPPING ${msg}`);
}
const describeReal = source ? describeWithStack : (name: string, _needs: unknown, fn: () => void) => describe.skip(name, fn);

describeReal('EvalSweep over real rollouts (vLLM, Docker sandboxes)', ['temporalBinary', 'docker', 'inference', 'model'], () => {
  const RUN = `itest-eval-real-${process.pid}`;
  let env: TestWorkflowEnvironment;
  let root: string;
  let store: LocalArtifactStore;
  let sandboxes: SandboxManager;

  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), 'ratchet-eval-real-'));
    process.env.RATCHET_ARTIFACTS = path.join(root, 'artifacts');
    process.env.RATCHET_TASKS = path.join(root, 'tasks');
    mkdirSync(process.env.RATCHET_TASKS, { recursive: true });
    writeTaskSubset(source!, 2, path.join(process.env.RATCHET_TASKS, 'heldout.jsonl'));
    store = new LocalArtifactStore(process.env.RATCHET_ARTIFACTS);
    sandboxes = new SandboxManager({ docker: new Docker(), log: logger });
    await store.putJson(`runs/${RUN}/config.json`, RunConfig.parse({
      env: [{ id: 'swe-grep', args: { max_tokens: 300, max_tool_calls: 2, max_turns: 2, few_shot: true } }],
      sampling: { max_tokens: 96, tool_choice: 'required' },
      sandbox: { warm_pool_size: 0 },
      inference: { base_urls: [process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1'] },
    }));
    env = await TestWorkflowEnvironment.createLocal({ server: { executable: { type: 'existing-path', path: TEMPORAL_BIN } } });
  }, 120_000);

  afterAll(async () => {
    await env?.teardown();
    await sandboxes?.close();
    delete process.env.RATCHET_ARTIFACTS;
    delete process.env.RATCHET_TASKS;
  });

  it('evaluates the base policy: every episode runs, is stored under evals/, and the result is written', async () => {
    const main = await Worker.create({
      connection: env.nativeConnection, taskQueue: 'ratchet',
      workflowsPath: require.resolve('../../src/workflows/evalSweep'),
      activities: createEvalActivities({ store, logger }),
    });
    const rollouts = await Worker.create({
      connection: env.nativeConnection, taskQueue: 'ratchet-rollout',
      activities: createRolloutActivities({ store, sandboxes }),
    });
    const res = await main.runUntil(rollouts.runUntil(env.client.workflow.execute('EvalSweep', {
      taskQueue: 'ratchet', workflowId: `eval-${RUN}`, args: [{ runId: RUN, versions: [0], taskset: 'heldout', k: 1, maxConcurrent: 2 }],
    }))) as EvalSweepResult;

    expect(res.evaluated.map((e) => e.version)).toEqual([0]);
    const result = EvalResult.parse(JSON.parse(readFileSync(store.localPath(res.evaluated[0]!.key), 'utf8')));
    expect(result.episodes).toBe(2);
    expect(result.errors).toBe(0);
    expect(result.localization.file).not.toBeNull(); // swe-grep answers with files
    expect(result.per_episode.tokens).toBeGreaterThan(0);
    expect(result.episodes_per_minute).toBeGreaterThan(0);

    const trajDir = store.localPath(`runs/${RUN}/evals/trajectories`);
    const files = readdirSync(trajDir, { recursive: true }).map(String).filter((f) => f.endsWith('.json') && !f.includes('.journal/')); // trajectories, not turn journals
    expect(files).toHaveLength(2);
    const t = Trajectory.parse(JSON.parse(readFileSync(path.join(trajDir, files[0]!), 'utf8')));
    expect(t.step).toBe(EVAL_STEP);
    expect(t.model).toBe('smollm2-135m');
    expect(t.turns[0]!.completion_token_ids!.length).toBeGreaterThan(0);
    // No training step's records were touched.
    expect(existsSync(store.localPath(`runs/${RUN}/steps`))).toBe(false);
  }, 600_000);
});
