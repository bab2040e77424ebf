/**
 * EvalSweep follows the run's [artifacts] store (input.artifacts), not the
 * worker's RATCHET_ARTIFACTS_URL: the real eval activities on two file:// stores
 * (the run's, and a different default), a fake rollout and weight sync, on a real
 * Temporal dev server. A store without the run fails before any episode.
 */
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Worker } from '@temporalio/worker';
import { WorkflowFailedError } from '@temporalio/client';
import { describeWithStack } from '../../helpers/stack';
import { useFakeWorld } from '../../helpers/fakeWorld';
import { createEvalActivities } from '../../../src/activities/eval';
import type { EvalSweepInput } from '../../../src/contracts/eval';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { defaultStore } from '../../../src/artifacts/stores';
import { loadRunConfig } from '../../../src/config/load';
import { paths } from '../../../src/shared/paths';
import type { RolloutInput } from '../../../src/contracts';
import type { SyncWeightsInput } from '../../../src/contracts';
import { logger as rootLogger } from '../../../src/shared/logger';

jest.setTimeout(120_000);

describeWithStack('EvalSweep through the run\'s [artifacts] store (real eval activities, fake rollout, real dev server)', ['temporalBinary'], () => {
  const world = useFakeWorld();
  let tmp: string;
  let runStore: LocalArtifactStore;
  let envStoreDir: string;
  let taskset: string;
  const savedEnv = process.env.RATCHET_ARTIFACTS_URL;

  beforeAll(async () => {
    tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'ratchet-evalart-'));
    runStore = new LocalArtifactStore(path.join(tmp, 'run-store'));
    envStoreDir = path.join(tmp, 'env-store');
    await fs.mkdir(envStoreDir, { recursive: true });
    // The worker's default store is somewhere else: the sweep must not look there.
    process.env.RATCHET_ARTIFACTS_URL = `file://${envStoreDir}`;
    const { config } = await loadRunConfig('configs/swe-grep/smoke.toml');
    await runStore.putJson('runs/r1/config.json', config);
    const adapter = await runStore.put('runs/r1/adapters/1/adapter_model.safetensors', 'weights');
    await runStore.put('runs/r1/metrics.jsonl', `${JSON.stringify({ policy_version: 1, adapter })}\n`);
    // r2: the same run served by an inference host that shares no disk (its own sync queue).
    await runStore.putJson('runs/r2/config.json', { ...config, inference: { ...config.inference, sync_task_queues: ['evalart-inference-host'] } });
    await runStore.put('runs/r2/metrics.jsonl', `${JSON.stringify({ policy_version: 1, adapter })}\n`);
    // r3: a full fine-tuning run (issue 41): its versions are whole checkpoints, no adapters.
    await runStore.putJson('runs/r3/config.json', { ...config, trainer: { ...config.trainer, mode: 'full' } });
    await runStore.put('runs/r3/metrics.jsonl', `${JSON.stringify({ policy_version: 1 })}\n`);
    const first = (await fs.readFile(path.join(paths.tasks(), 'heldout.jsonl'), 'utf8')).split('\n')[0]!;
    taskset = path.join(tmp, 'one.jsonl');
    await fs.writeFile(taskset, `${first}\n`);
  }, 180_000);

  afterAll(async () => {
    if (savedEnv === undefined) delete process.env.RATCHET_ARTIFACTS_URL;
    else process.env.RATCHET_ARTIFACTS_URL = savedEnv;
    if (tmp) await fs.rm(tmp, { recursive: true, force: true });
  });

  /** The activity's own message: WorkflowFailedError → ActivityFailure → ApplicationFailure. */
  const failureText = (r: { ok: boolean }): string => {
    let e: unknown = (r as { err?: WorkflowFailedError }).err;
    const parts: string[] = [];
    while (e instanceof Error) { parts.push(e.message); e = e.cause; }
    return parts.join(' | ');
  };

  let n = 0;
  async function sweep(input: EvalSweepInput) {
    const synced: SyncWeightsInput[] = [];
    const hostSynced: SyncWeightsInput[] = [];
    const rollouts: RolloutInput[] = [];
    const evalActs = createEvalActivities({ store: defaultStore(), logger: rootLogger });
    const main = {
      ...evalActs,
      async syncWeights(i: SyncWeightsInput) { synced.push(i); return { ms: 1 }; },
    };
    const rollout = {
      async rollout(i: RolloutInput) {
        rollouts.push(i);
        const trajectory = await runStore.putJson(`runs/${i.runId}/evals/traj/${i.groupId}-${i.rolloutIndex}.json`, { final: { files: [] }, stats: { prompt_tokens: 3 } });
        return {
          task_id: i.task.instanceId, group_id: i.groupId, rollout_index: i.rolloutIndex, trajectory, reward: 0.5, components: {},
          stop_reason: 'done', policy_version: i.policyVersion, completion_tokens: 1, tool_calls: 0, model_ms: 1, tools_ms: 0, sandbox_ms: 0,
        };
      },
    };
    const conn = world.env.nativeConnection;
    const workers = await Promise.all([
      Worker.create({ connection: conn, taskQueue: 'ratchet', workflowBundle: world.bundle, activities: main }),
      Worker.create({ connection: conn, taskQueue: 'ratchet-rollout', activities: rollout }),
      Worker.create({ connection: conn, taskQueue: 'evalart-inference-host', activities: { async syncWeights(i: SyncWeightsInput) { hostSynced.push(i); return { ms: 1 }; } } }),
    ]);
    const all = Promise.all(workers.map((w) => w.run()));
    try {
      const result = await world.env.client.workflow.execute('EvalSweep', { taskQueue: 'ratchet', workflowId: `evalart-${++n}-${Date.now()}`, args: [input] })
        .then((r) => ({ ok: true as const, r }), (err: unknown) => ({ ok: false as const, err }));
      return { result, synced, hostSynced, rollouts };
    } finally {
      for (const w of workers) w.shutdown();
      await all;
    }
  }

  it('reads the run, syncs its adapter and writes results through the given store, not RATCHET_ARTIFACTS_URL', async () => {
    const artifacts = { url: `file://${runStore.root}` };
    const { result, synced, rollouts } = await sweep({ runId: 'r1', versions: [1], taskset, k: 1, artifacts });
    if (!result.ok) throw new Error(failureText(result));
    const [summary] = (result.r as { evaluated: { key: string }[] }).evaluated;
    expect(rollouts).toHaveLength(1);
    // Weight sync is told the run's store, so an s3:// adapter is pulled into the inference host's cache.
    expect(synced).toHaveLength(1);
    expect(synced[0]!.artifacts).toEqual(artifacts);
    expect(await runStore.exists(summary!.key)).toBeTruthy();
    expect(await new LocalArtifactStore(envStoreDir).exists(summary!.key)).toBeFalsy();
  });

  it('syncs on the inference host\'s own queue (inference.sync_task_queues) with the run\'s store, as TrainRun does', async () => {
    const artifacts = { url: `file://${runStore.root}` };
    const { result, synced, hostSynced } = await sweep({ runId: 'r2', versions: [1], taskset, k: 1, artifacts });
    if (!result.ok) throw new Error(failureText(result));
    expect(synced).toHaveLength(0);
    expect(hostSynced).toHaveLength(1);
    expect(hostSynced[0]!.artifacts).toEqual(artifacts);
    expect(hostSynced[0]!.adapter?.uri).toContain('/run-store/runs/r1/adapters/1/');
  });

  it('without artifacts (an old input) uses the worker default store, which does not hold the run', async () => {
    const { result, rollouts } = await sweep({ runId: 'r1', versions: [1], taskset, k: 1 });
    expect(result.ok).toBe(false);
    expect(failureText(result)).toContain(envStoreDir);
    expect(rollouts).toHaveLength(0);
  });

  it('a full fine-tuning run is refused before any sync or episode: a sweep serves versions as adapters', async () => {
    const { result, rollouts, synced } = await sweep({ runId: 'r3', versions: [1], taskset, k: 1, artifacts: { url: `file://${runStore.root}` } });
    expect(result.ok).toBe(false);
    expect(failureText(result)).toMatch(/run "r3" trains every weight \(trainer\.mode = "full"\).*Fix: evaluate its checkpoints' model\/ directories on a vLLM of their own/);
    expect([rollouts, synced]).toEqual([[], []]);
  });

  it('an artifacts location without the run fails before any episode, naming the run, the URL and the fix', async () => {
    const elsewhere = `file://${path.join(tmp, 'empty-store')}`;
    const { result, rollouts, synced } = await sweep({ runId: 'r1', versions: [1], taskset, k: 1, artifacts: { url: elsewhere } });
    expect(result.ok).toBe(false);
    const msg = failureText(result);
    expect(msg).toContain('run "r1" not found');
    expect(msg).toContain(elsewhere);
    expect(msg).toMatch(/Fix: .*--config/);
    expect(rollouts).toHaveLength(0);
    expect(synced).toHaveLength(0);
  });
});
