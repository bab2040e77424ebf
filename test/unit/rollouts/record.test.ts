/**
 * Issue 39, item 8: a rollout summary crosses Temporal in heartbeat details and failure details, up to
 * rollouts_per_chunk of them in one payload. Its `commands` map is keyed by whatever the agent ran,
 * so it is bounded where the summary is built, and the summary's size is checked against
 * SUMMARY_BYTES_MAX (what the fan-out checks count on).
 *
 * The "stale writes after a partition" block:
 * Stale writes after a partition (issue 25, hole 5): a rollout host cut off from
 * Temporal but not from the store finishes its stale attempt after the retry
 * did. Trajectories are content-keyed, so the stale write lands beside the
 * retry's object, never on it: the summary the workflow recorded still points
 * at intact bytes, and buildBatch reads the winner (no CorruptArtifact).
 */
import { SUMMARY_BYTES_MAX } from '../../../src/config/fanout';
import { Trajectory } from '../../../src/contracts/trajectory';
import { COMMANDS_NAMED, OTHER_COMMANDS, boundedSummary, summaryOfStored, saveTrajectory } from '../../../src/rollouts/record';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { createBatchActivities } from '../../../src/activities/buildBatch';
import type { ArtifactRef } from '../../../src/artifacts/ref';
import { LocalArtifactStore, sha256, type ArtifactStore } from '../../../src/artifacts/store';
import type { RolloutSummary } from '../../../src/contracts/trajectory';
import { loadModelTokenizer } from '../../../src/samples/tokenizer';
import { simulateTrajectory, SMOLLM2_DIR, smolLM2Available, toolConversation } from '../../fixtures/samples/simulate';

/** An agent that ran 2,000 distinct programs with long names, and `rg` most of all. */
function floodingTrajectory(taskId = 't1'): Trajectory {
  const commands = ['rg', 'rg', 'rg', 'cat', 'cat', ...Array.from({ length: 2_000 }, (_, i) => `./script_${i}_${'x'.repeat(180)}`)];
  return Trajectory.parse({
    format: 'ratchet.trajectory/v1', run_id: 'r', step: 0, env_id: 'swe-grep', task_id: taskId, group_id: 's0-g0',
    rollout_index: 0, model: 'm', tools: [], messages: [{ role: 'user', content: 'go' }], turns: [], stop_reason: 'completed',
    final: {}, reward: { total: 0.5, components: { f1: 0.5 } },
    stats: { prompt_tokens: 1, completion_tokens: 1, tool_calls: commands.length, tool_errors: 0, commands, tools_used: { shell: commands.length } },
    timing: { model_ms: 1, tools_ms: 1, sandbox_ms: 1, total_ms: 3 },
  });
}
const ref = { uri: 'file:///x', sha256: 'a'.repeat(64), bytes: 1 };

describe('a rollout summary is bounded where it is built', () => {
  test('2,000 distinct commands: the summary stays under SUMMARY_BYTES_MAX and every command is still counted', () => {
    const s = summaryOfStored(floodingTrajectory(), ref, 0);
    expect(Buffer.byteLength(JSON.stringify(s))).toBeLessThanOrEqual(SUMMARY_BYTES_MAX);
    const commands = s.commands!;
    // The most used are named; the rest are counted together, so the total is the agent's own count (2,005).
    expect(commands.rg).toBe(3);
    expect(commands.cat).toBe(2);
    expect(Object.keys(commands).length).toBe(COMMANDS_NAMED + 1);
    expect(commands[OTHER_COMMANDS]).toBe(2_005 - Object.entries(commands).filter(([k]) => k !== OTHER_COMMANDS).reduce((a, [, n]) => a + n, 0));
    expect(Object.values(commands).reduce((a, n) => a + n, 0)).toBe(2_005);
  });

  test('a summary still too large after that names its largest field and the fix', () => {
    const s = summaryOfStored(floodingTrajectory(), ref, 0);
    expect(() => boundedSummary({ ...s, task_id: 'T'.repeat(SUMMARY_BYTES_MAX) })).toThrow(/largest field is task_id .*Fix:/);
  });
});

describe('stale writes after a partition', () => {
  const ORCH = {
    seq_len: 2048, mask_truncated_completions: false, async_level: 1,
    advantage: { kind: 'grpo' as const, std_normalize: true, drop_uniform_groups: false },
    non_prefix_policy: 'split' as const, allow_retokenize: false,
  };

  /** An S3-like store in memory: objects by key, the last put wins (S3 without a conditional put). */
  class LastWriteWinsStore implements ArtifactStore {
    readonly url = 's3://fake-bucket';
    readonly objects = new Map<string, Buffer>();
    async put(key: string, data: Buffer | string): Promise<ArtifactRef> {
      const buf = typeof data === 'string' ? Buffer.from(data) : data;
      this.objects.set(key, buf);
      return { uri: `s3://fake-bucket/${key}`, sha256: sha256(buf), bytes: buf.length };
    }
    putJson(key: string, value: unknown): Promise<ArtifactRef> { return this.put(key, JSON.stringify(value)); }
    async putIfAbsent(key: string, data: Buffer | string): Promise<{ ref: ArtifactRef; created: boolean }> {
      const there = this.objects.get(key);
      if (there) return { ref: { uri: `s3://fake-bucket/${key}`, sha256: sha256(there), bytes: there.length }, created: false };
      return { ref: await this.put(key, data), created: true };
    }
    async get(ref: ArtifactRef): Promise<Buffer> {
      const buf = this.objects.get(ref.uri.replace('s3://fake-bucket/', ''));
      if (!buf) throw Object.assign(new Error(`no ${ref.uri}`), { code: 'ENOENT' });
      if (sha256(buf) !== ref.sha256) throw new Error(`corrupt ${ref.uri}`);
      return buf;
    }
    async getJson<T = unknown>(ref: ArtifactRef): Promise<T> { return JSON.parse((await this.get(ref)).toString('utf8')) as T; }
    async exists(): Promise<ArtifactRef | undefined> { return undefined; }
    async read(key: string): Promise<Buffer | undefined> { return this.objects.get(key); }
    async list(prefix: string): Promise<string[]> { return [...this.objects.keys()].filter((k) => k.startsWith(prefix)).sort(); }
    putDir(): Promise<ArtifactRef> { throw new Error('not used'); }
    localDir(): Promise<string> { throw new Error('not used'); }
  }

  function attempt(base: Trajectory, reward: number, note: string): Trajectory {
    return { ...base, reward: { total: reward, components: { correct: reward } }, final: { ...base.final, note } };
  }

  describe.each([
    ['a local store', (root: string): ArtifactStore => new LocalArtifactStore(root)],
    ['an S3-like store (last write wins)', (): ArtifactStore => new LastWriteWinsStore()],
  ])('a stale rollout attempt that finishes after its retry, on %s', (_name, makeStore) => {
    let root: string;
    let store: ArtifactStore;
    beforeEach(() => {
      root = mkdtempSync(path.join(tmpdir(), 'ratchet-stale-'));
      store = makeStore(root);
    });
    afterEach(() => rmSync(root, { recursive: true, force: true }));

    const base: Trajectory = {
      format: 'ratchet.trajectory/v1', run_id: 'r1', step: 2, env_id: 'swe-grep', task_id: 't1', group_id: 'g0', rollout_index: 1,
      model: 'r1/policy-v1', tools: [], messages: [], turns: [], stop_reason: 'completed', final: {},
      reward: { total: 0, components: {} }, stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} },
      timing: { model_ms: 0, tools_ms: 0, sandbox_ms: 0, total_ms: 0 },
    } as unknown as Trajectory;

    test('never overwrites what the newer attempt wrote: the recorded ref still reads its own bytes', async () => {
      const newer = attempt(base, 1, 'attempt 2 (the retry, recorded by the workflow)');
      const stale = attempt(base, 0, 'attempt 1 (cut off from Temporal, finishes late)');
      const recorded = await saveTrajectory(store, newer);
      const staleRef = await saveTrajectory(store, stale); // after the retry: the partition heals
      expect(staleRef.uri).not.toBe(recorded.uri);
      expect(await store.getJson<Trajectory>(recorded)).toEqual(newer);
      expect(await store.getJson<Trajectory>(staleRef)).toEqual(stale);
      expect(recorded.uri).toMatch(new RegExp(`runs/r1/steps/2/rollouts/g0/1-${recorded.sha256.slice(0, 16)}\\.json$`));
    });

    test('a second write of the same content is the same object (a retry that reproduces its bytes is idempotent)', async () => {
      const t = attempt(base, 1, 'same');
      expect(await saveTrajectory(store, t)).toEqual(await saveTrajectory(store, t));
    });

    test('reads of an old run\'s key (<i>.json, from a stored summary) still work', async () => {
      const ref = await store.putJson('runs/r0/steps/0/rollouts/g0/1.json', base);
      expect(await store.getJson<Trajectory>(ref)).toEqual(base);
    });
  });

  (smolLM2Available() ? describe : describe.skip)('buildBatch after a stale attempt (SmolLM2 tokenizer)', () => {
    let root: string;
    beforeEach(() => { root = mkdtempSync(path.join(tmpdir(), 'ratchet-stale-batch-')); });
    afterEach(() => rmSync(root, { recursive: true, force: true }));

    test('reads the winners the summaries refer to; no CorruptArtifact', async () => {
      const store = new LocalArtifactStore(root);
      const tok = loadModelTokenizer(SMOLLM2_DIR);
      const group = [0, 1, 2, 3].map((i) => ({
        ...simulateTrajectory(tok, { ...toolConversation(), rollout_index: i, reward: i % 2, components: { correct: i % 2 } }),
        run_id: 'r1', step: 0,
      }));
      const summaries: RolloutSummary[] = [];
      for (const t of group) {
        summaries.push({
          task_id: t.task_id, group_id: t.group_id, rollout_index: t.rollout_index, trajectory: await saveTrajectory(store, t),
          reward: t.reward!.total, components: t.reward!.components, stop_reason: t.stop_reason, policy_version: 0,
          completion_tokens: 0, tool_calls: 0, model_ms: 0, tools_ms: 0, sandbox_ms: 0,
        });
      }
      // Rollout 2's first attempt, cut off from Temporal, finishes after its retry was recorded: other bytes, same rollout.
      const staleRef = await saveTrajectory(store, { ...group[2]!, reward: { total: 0.25, components: { correct: 0.25 } }, final: { note: 'stale' } });
      expect(staleRef.uri).not.toBe(summaries[2]!.trajectory.uri);
      const out = await createBatchActivities({ store }).buildBatch({
        runId: 'r1', step: 0, trainerPolicyVersion: 0, trajectories: summaries, orchestrator: ORCH, modelPath: SMOLLM2_DIR,
      });
      expect(out.summary).toMatchObject({ rollouts: 4, mean_reward: 0.5 });
    });
  });
});
