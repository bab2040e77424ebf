/**
 * trainer.mode = "full": a replica that restarted mid-step comes back on the base model under the same served
 * name. A fake replica over real HTTP (its GET /v1/ratchet/weights answers as infra/vllm/ratchet_weights.py
 * does, /v1/models as vLLM does) is synced, restarted, synced again; the rollout activity must refuse to
 * sample from it while it serves the base model (InferenceUnavailable: StepRollouts syncs the version),
 * move to a replica that serves the version when there is one, and record the directory each turn came from.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createRolloutActivities } from '../../../src/activities/rollout';
import { ServedWeights, ServedWeightsMismatch, guardServedWeights, weightsMismatch } from '../../../src/agent/servedWeights';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import type { RolloutInput } from '../../../src/contracts/rollout';
import { Trajectory, type RolloutSummary } from '../../../src/contracts/trajectory';
import { CALC_FILES, FakeSandboxManager, ScriptedModel, call } from '../../helpers/rolloutFakes';

jest.setTimeout(30_000);

const BASE = '/models/smollm2-135m';
const root = '/data/ratchet/artifacts/runs/run1/checkpoints';
const CKPT1 = `file://${root}/step-0-aaaaaaaaaaaaaaaa`;
const DIR1 = `${root}/step-0-aaaaaaaaaaaaaaaa/model`;
const DIR2 = `${root}/step-1-bbbbbbbbbbbbbbbb/model`;

/** A vLLM replica as full-weight sync sees it: one worker, started on the base model. */
class FakeReplica {
  paths = [BASE];
  gets = 0;
  private server!: Server;
  url = '';
  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      res.setHeader('content-type', 'application/json');
      if (req.url === '/v1/ratchet/weights') {
        this.gets++;
        res.end(JSON.stringify({ base: BASE, paths: this.paths }));
      } else if (req.url === '/v1/models') {
        res.end(JSON.stringify({ data: [{ id: 'smollm2-135m', root: BASE }] }));
      } else {
        res.statusCode = 404;
        res.end('{}');
      }
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
    return this;
  }
  /** What a sync does (POST /v1/ratchet/weights). */
  load(dir: string) { this.paths = [dir]; }
  /** A vLLM restart: it loads the base model again. */
  restart() { this.paths = [BASE]; }
  stop() { return new Promise((r) => this.server.close(r)); }
}

describe('weightsMismatch: which served directories are the rollout\'s version', () => {
  const v1 = { runId: 'run1', policyVersion: 1, checkpoint: CKPT1 };
  test.each([
    ['the version\'s checkpoint', v1, [DIR1], false],
    ['its host-cache copy (s3: the object key, then the sha)', v1, [`/home/r/.ratchet/cache/s3/bkt/runs/run1/checkpoints/step-0-aaaaaaaaaaaaaaaa/model/0123456789abcdef`], false],
    ['a later checkpoint of the run (the next version landed mid-rollout)', v1, [DIR2], false],
    ['the base model (a restarted replica)', v1, [BASE], true],
    ['one tensor-parallel worker on the base model', v1, [DIR1, BASE], true],
    ['an earlier checkpoint of the run', { ...v1, checkpoint: `file://${root}/step-1-bbbbbbbbbbbbbbbb` }, [DIR1], true],
    ['another attempt of the same step (a redone step)', v1, [`${root}/step-0-cccccccccccccccc/model`], true],
    ['another run\'s checkpoint', v1, ['/data/ratchet/artifacts/runs/run2/checkpoints/step-5-dddddddddddddddd/model'], true],
    ['no worker reports', v1, [], true],
    ['version 0: the base model', { runId: 'run1', policyVersion: 0 }, [`${BASE}/`], false],
    ['version 0: another run\'s weights', { runId: 'run1', policyVersion: 0 }, ['/data/ratchet/artifacts/runs/run2/checkpoints/step-5-dddddddddddddddd/model'], true],
  ])('%s', (_what, expected, paths, wrong) => {
    expect(weightsMismatch(expected, BASE, paths) !== undefined).toBe(wrong);
  });

  test('the reason names the restart and the expected checkpoint', () => {
    expect(weightsMismatch(v1, BASE, [BASE])).toBe(`serves the base model (${BASE}): a restarted replica, not checkpoint step-0-aaaaaaaaaaaaaaaa (policy version 1 of run run1)`);
  });
});

describe('guardServedWeights over a fake replica', () => {
  let replica: FakeReplica;
  beforeEach(async () => { replica = await new FakeReplica().start(); });
  afterEach(() => replica.stop());
  const req = { model: 'smollm2-135m', messages: [], tools: [], sampling: { temperature: 1, top_p: 1, max_tokens: 8 } };

  test('synced: samples, and says from which directory; restarted: refuses before sampling; synced again: samples', async () => {
    const inner = new ScriptedModel([{ content: 'a' }, { content: 'b' }, { content: 'c' }]);
    const client = guardServedWeights(inner, replica.url, { runId: 'run1', policyVersion: 1, checkpoint: CKPT1 }, new ServedWeights({ ttlMs: 0 }));
    replica.load(DIR1);
    await expect(client.complete(req)).resolves.toMatchObject({ content: 'a', weights: DIR1 });
    replica.restart();
    const err = await client.complete(req).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(ServedWeightsMismatch);
    expect((err as ServedWeightsMismatch).served).toEqual([BASE]);
    expect(inner.requests).toHaveLength(1);
    replica.load(DIR1);
    await expect(client.complete(req)).resolves.toMatchObject({ content: 'b', weights: DIR1 });
  });

  test('one answer stands for ttlMs across rollouts; a failed request makes the next one ask again', async () => {
    // The clock stands still: every ask is within the ttl.
    const weights = new ServedWeights({ ttlMs: 1_000, now: () => 0 });
    const expected = { runId: 'run1', policyVersion: 1, checkpoint: CKPT1 };
    replica.load(DIR1);
    let fail = false;
    const inner = { complete: async () => { if (fail) throw new Error('socket hang up'); return new ScriptedModel([]).complete(req); } };
    const a = guardServedWeights(inner, replica.url, expected, weights);
    const b = guardServedWeights(inner, replica.url, expected, weights);
    await a.complete(req);
    await b.complete(req);
    expect(replica.gets).toBe(1);
    fail = true;
    await expect(a.complete(req)).rejects.toThrow('socket hang up');
    replica.restart();
    fail = false;
    // Within the ttl, but the failure dropped the answer: the restart is seen.
    await expect(b.complete(req)).rejects.toBeInstanceOf(ServedWeightsMismatch);
    expect(replica.gets).toBe(2);
  });

  test('a replica without the route (restarted without Ratchet\'s hooks) is a mismatch, naming the HTTP answer', async () => {
    const client = guardServedWeights(new ScriptedModel([]), `${replica.url}/nowhere`, { runId: 'run1', policyVersion: 0 }, new ServedWeights());
    await expect(client.complete(req)).rejects.toThrow(/could not say which weights it serves \(GET \/v1\/ratchet\/weights: HTTP 404/);
  });
});

describe('rollout activity, trainer.mode = "full": a restarted replica is noticed before it samples', () => {
  const replicas: FakeReplica[] = [];
  afterEach(async () => { await Promise.all(replicas.splice(0).map((r) => r.stop())); });

  const task = {
    instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1', patch: '',
    FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: [], gold_files: ['pkg/calc.py'], test_cmd: 'python3 -m pytest',
    source: { type: 'snapshot' as const, repo_path: 'repos/calc.git' },
  };
  const input = (urls: string[]): RolloutInput => ({
    runId: 'run1', step: 1, groupId: 'g0', rolloutIndex: 0, envId: 'swe-grep', task, taskSetDir: '/tasks',
    policyVersion: 1, modelName: 'smollm2-135m', sampling: { temperature: 1, top_p: 1, max_tokens: 64 },
    envArgs: { max_tokens: 500, max_tool_calls: 5, max_turns: 4 }, rubric: {},
    sandbox: { memory_mb: 512, cpus: 1, pids_limit: 128, disk_mb: 256, exec_timeout_s: 30, output_limit_bytes: 16384, warm_pool_size: 0 },
    inferenceBaseUrl: urls[0]!, ...(urls.length > 1 ? { inferenceBaseUrls: urls } : {}), seed: 7,
    fullWeights: { checkpoint: CKPT1 },
  });
  const turns = () => [
    { tool_calls: [call('bash', { command: 'grep -rn "def add" pkg' })] },
    { tool_calls: [call('result', { files: ['pkg/calc.py'], functions: ['add'] })] },
  ];
  const setup = async (n: number) => {
    for (let i = 0; i < n; i++) replicas.push(await new FakeReplica().start());
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
    const models = new Map(replicas.map((r) => [r.url, new ScriptedModel(turns())]));
    const acts = createRolloutActivities({
      store, sandboxes: new FakeSandboxManager(CALC_FILES), openaiFactory: (u) => models.get(u)!, servedWeights: new ServedWeights({ ttlMs: 0 }),
    });
    return { store, acts, models };
  };

  test('one replica restarted after the sync: the rollout fails as InferenceUnavailable without sampling; after the re-sync it runs and records the weights', async () => {
    const { store, acts, models } = await setup(1);
    const r = replicas[0]!;
    r.load(DIR1);
    r.restart();
    const env = new MockActivityEnvironment({ attempt: 1 });
    const err = await env.run(acts.rollout, input([r.url])).then(() => undefined, (e: unknown) => e);
    expect(err).toMatchObject({ type: 'InferenceUnavailable' });
    expect((err as Error).message).toContain(`serves the base model (${BASE}): a restarted replica, not checkpoint step-0-aaaaaaaaaaaaaaaa`);
    expect(models.get(r.url)!.requests).toHaveLength(0);
    // StepRollouts' answer to InferenceUnavailable: the version's sync reloads the replica.
    r.load(DIR1);
    const summary: RolloutSummary = await env.run(acts.rollout, input([r.url]));
    const traj = Trajectory.parse(await store.getJson(summary.trajectory));
    expect(traj.turns.map((t) => t.weights)).toEqual([DIR1, DIR1]);
  });

  test('a LoRA rollout (no fullWeights) never asks', async () => {
    const { acts } = await setup(1);
    const lora = input([replicas[0]!.url]);
    delete lora.fullWeights;
    await new MockActivityEnvironment({ attempt: 1 }).run(acts.rollout, lora);
    expect(replicas[0]!.gets).toBe(0);
  });

  test('two replicas, the preferred one restarted: the rollout samples from the one that serves the version', async () => {
    const { store, acts, models } = await setup(2);
    const [restarted, synced] = replicas as [FakeReplica, FakeReplica];
    synced.load(DIR1);
    const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 1 }).run(acts.rollout, input([restarted.url, synced.url]));
    const traj = Trajectory.parse(await store.getJson(summary.trajectory));
    expect(traj.turns.map((t) => [t.replica, t.weights])).toEqual([[synced.url, DIR1], [synced.url, DIR1]]);
    expect(models.get(restarted.url)!.requests).toHaveLength(0);
  });
});
