/**
 * Retention ([artifacts.retention], issue 42): what of a run's stored objects can go, and going.
 *
 * A run writes a checkpoint with optimizer state every step and a turn journal for every rollout; nothing
 * was ever deleted, so a long run filled its disk. The plan (planRetention, pure) keeps everything the run
 * or a person may still need:
 *   - the newest `keep_last` checkpoints whole (optimizer and trainer state included): the run resumes from
 *     the newest, a checkpoint fallback (./fallback.ts) goes back to one of the others, and in-flight
 *     rollouts' adapters (async_level) are among them (crossChecks holds keep_last > async_level);
 *   - the adapter (weights only) of every policy version that is a multiple of `keep_every`, and of every
 *     step that started an eval sweep (the sweep reads it, abandoned by the run);
 *   - every checkpoint of a step not yet recorded, and every partial write (`.tmp-`);
 *   - batches, trajectories, summaries, manifests and records: lineage, replay-step and reports read them.
 * It deletes the other checkpoints (older ones, the losing saves of a step, those of epochs a fallback
 * voided), the optimizer and trainer state of the adapter-only ones, and the turn journals of recorded
 * steps. Each application appends a retention record naming the checkpoints it pruned, so the fallback
 * passes them over instead of reporting them corrupt. Used after every recorded step (recordStep) and by
 * `ratchet gc` on a finished run, which also deletes eval episodes' journals.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { runKeys } from '../artifacts/keys';
import { isPrunable, type ArtifactStore, type StoredKey } from '../artifacts/store';
import type { RunStateFile, StepRecord } from '../contracts/records';
import { RetentionConfig } from '../config/schema';
import { readRunRecords } from './runRecords';

export type RetentionPolicy = RetentionConfig;

export interface Deletion { key: string; bytes: number; why: string }

export interface CheckpointFate {
  /** The checkpoint's directory name under runs/<run>/checkpoints/. */
  dir: string;
  step: number;
  keep: 'whole' | 'adapter' | 'none';
  why: string;
  /** The sha256 its step record names (absent: no winning record names it). */
  sha256?: string;
}

export interface RetentionPlan {
  delete: Deletion[];
  checkpoints: CheckpointFate[];
  bytes: number;
}

export interface RetentionInput {
  runId: string;
  /** The run's objects under runs/<run>/checkpoints/ and the step folders to clean (store.listSized). */
  keys: StoredKey[];
  /** The winning step records (readRunRecords(...).steps). */
  records: StepRecord[];
  state: Pick<RunStateFile, 'completedStep' | 'checkpoint'>;
  policy: RetentionPolicy;
  /** [orchestrator] async_level of a running run: rollouts may still use the newest async_level + 1 adapters. */
  asyncLevel?: number;
  /** `ratchet gc` on a finished run: eval episodes' journals go too (no sweep can still retry one). */
  finished?: boolean;
}

const lastSegment = (uri: string): string => uri.replace(/\/+$/, '').split('/').pop() ?? '';

/** What can go (pure: the same input, the same plan). */
export function planRetention(input: RetentionInput): RetentionPlan {
  const { runId, policy } = input;
  const ckptPrefix = `${runKeys.run(runId)}/checkpoints/`;
  const dirs = new Map<string, StoredKey[]>();
  for (const k of input.keys) {
    if (!k.key.startsWith(ckptPrefix)) continue;
    const dir = k.key.slice(ckptPrefix.length).split('/')[0]!;
    dirs.set(dir, [...(dirs.get(dir) ?? []), k]);
  }
  const byDir = new Map<string, StepRecord>();
  for (const r of input.records) if (r.checkpoint) byDir.set(lastSegment(r.checkpoint.uri), r);
  const newestFirst = [...byDir.entries()].sort(([, a], [, b]) => b.step - a.step);
  // `ratchet set --async-level` may have raised the lag above what keep_last was checked against.
  const keepLast = Math.max(policy.keep_last, (newestFirst[0]?.[1].overrides?.async_level ?? input.asyncLevel ?? 0) + 1);
  const whole = new Set(newestFirst.slice(0, keepLast).map(([d]) => d));
  if (input.state.checkpoint) whole.add(lastSegment(input.state.checkpoint.uri));

  const fates: CheckpointFate[] = [];
  const out: Deletion[] = [];
  for (const [dir, files] of [...dirs].sort(([a], [b]) => (a < b ? -1 : 1))) {
    const step = Number(/^step-(\d+)/.exec(dir)?.[1] ?? NaN);
    const rec = byDir.get(dir);
    const fate = (keep: CheckpointFate['keep'], why: string) => fates.push({ dir, step, keep, why, ...(rec?.checkpoint ? { sha256: rec.checkpoint.sha256 } : {}) });
    if (dir.includes('.tmp-') || !Number.isInteger(step)) { fate('whole', 'not a finished checkpoint (a write in progress, or unknown)'); continue; }
    if (step > input.state.completedStep) { fate('whole', 'its step is not recorded yet'); continue; }
    if (whole.has(dir)) { fate('whole', `among the newest ${keepLast} (resume, fallback, in-flight adapters)`); continue; }
    const version = rec?.policy_version;
    const adapterWhy = rec?.eval_sweep ? 'an eval sweep evaluates its adapter'
      : version !== undefined && policy.keep_every > 0 && version % policy.keep_every === 0 ? `policy version ${version} is a multiple of keep_every = ${policy.keep_every}` : undefined;
    if (adapterWhy) {
      fate('adapter', adapterWhy);
      const adapter = `${ckptPrefix}${dir}/adapter/`;
      for (const f of files) if (!f.key.startsWith(adapter)) out.push({ ...f, why: `checkpoint ${dir}: optimizer and trainer state (adapter kept: ${adapterWhy})` });
      continue;
    }
    const why = rec ? `checkpoint ${dir}: older than the newest ${keepLast}` : `checkpoint ${dir}: no winning step record names it (a losing save, or an epoch a fallback voided)`;
    fate('none', why);
    for (const f of files) out.push({ ...f, why });
  }

  const stepsPrefix = `${runKeys.run(runId)}/steps/`;
  const evalJournals = `${runKeys.run(runId)}/evals/trajectories/`;
  for (const k of input.keys) {
    if (!policy.journals || !/\/\d+\.journal\//.test(k.key)) continue;
    if (k.key.startsWith(stepsPrefix)) {
      const step = Number(k.key.slice(stepsPrefix.length).split('/')[0]);
      if (step <= input.state.completedStep) out.push({ ...k, why: `turn journal of step ${step} (recorded)` });
    } else if (input.finished && k.key.startsWith(evalJournals)) {
      out.push({ ...k, why: 'turn journal of an eval episode (the run is finished)' });
    }
  }
  return { delete: out, checkpoints: fates, bytes: out.reduce((a, d) => a + d.bytes, 0) };
}

/** A retention record (records/retention/): what one application deleted, and the checkpoints it pruned. */
export const RetentionRecord = z.object({
  format: z.literal('ratchet.retention/v1'),
  run_id: z.string(),
  time: z.string(),
  by: z.enum(['run', 'gc']),
  completed_step: z.number().int(),
  policy: z.object({ keep_last: z.number().int(), keep_every: z.number().int(), journals: z.boolean() }),
  /** Checkpoints no longer whole (their sha256 as step records name it): the fallback passes them over. */
  pruned: z.array(z.object({ dir: z.string(), step: z.number().int(), sha256: z.string().optional(), kept: z.enum(['adapter', 'none']) })),
  deleted: z.object({ keys: z.number().int(), bytes: z.number().int() }),
});
export type RetentionRecord = z.infer<typeof RetentionRecord>;

/** The checkpoints (by sha256) any retention record pruned: not whole any more, so never a fallback target. */
export async function prunedCheckpoints(store: ArtifactStore, runId: string): Promise<Set<string>> {
  const out = new Set<string>();
  for (const key of await store.list(`${runKeys.records(runId)}/retention`)) {
    const buf = await store.read(key);
    const rec = buf && RetentionRecord.safeParse(JSON.parse(buf.toString('utf8')));
    if (rec?.success) for (const p of rec.data.pruned) if (p.sha256) out.add(p.sha256);
  }
  return out;
}

/** Lists the run's checkpoints and the given step folders (all of them: undefined), with sizes. */
export async function listForRetention(store: ArtifactStore, runId: string, steps?: number[]): Promise<StoredKey[]> {
  if (!isPrunable(store)) throw new Error(`artifact store ${store.url} cannot list sizes or delete; retention needs a local directory or an S3 store`);
  const folders = steps === undefined ? [`${runKeys.run(runId)}/steps`, `${runKeys.run(runId)}/evals/trajectories`] : steps.map((s) => runKeys.rollouts(runId, s));
  const lists = await Promise.all([`${runKeys.run(runId)}/checkpoints`, ...folders].map((p) => store.listSized(p)));
  return lists.flat();
}

/** Deletes what `plan` lists and appends its retention record (records first: the fallback must know before a checkpoint goes). */
export async function applyRetention(store: ArtifactStore, input: Omit<RetentionInput, 'keys'> & { by: 'run' | 'gc'; time: string }, plan: RetentionPlan): Promise<RetentionRecord> {
  if (!isPrunable(store)) throw new Error(`artifact store ${store.url} cannot delete; retention needs a local directory or an S3 store`);
  const record: RetentionRecord = {
    format: 'ratchet.retention/v1', run_id: input.runId, time: input.time, by: input.by, completed_step: input.state.completedStep,
    policy: { keep_last: input.policy.keep_last, keep_every: input.policy.keep_every, journals: input.policy.journals },
    pruned: plan.checkpoints.filter((c) => c.keep !== 'whole' && plan.delete.some((d) => d.key.includes(`/checkpoints/${c.dir}/`))).map((c) => ({ dir: c.dir, step: c.step, ...(c.sha256 ? { sha256: c.sha256 } : {}), kept: c.keep as 'adapter' | 'none' })),
    deleted: { keys: plan.delete.length, bytes: plan.bytes },
  };
  if (!plan.delete.length) return record;
  const text = JSON.stringify(record);
  await store.putIfAbsent(runKeys.retentionRecord(input.runId, input.time, createHash('sha256').update(text).digest('hex')), text);
  await store.remove(plan.delete.map((d) => d.key));
  return record;
}

/** What retention reads of the stored config (nothing else: a config a newer build stored must not fail here). */
async function storedSettings(store: ArtifactStore, runId: string): Promise<{ retention?: unknown; asyncLevel?: number }> {
  const buf = await store.read(runKeys.config(runId));
  const c = buf && (JSON.parse(buf.toString('utf8')) as { artifacts?: { retention?: unknown }; orchestrator?: { async_level?: number } });
  return { retention: c?.artifacts?.retention ?? undefined, asyncLevel: c?.orchestrator?.async_level };
}

/** The run's [artifacts.retention] as its stored config has it; undefined: keep everything. */
export async function retentionOf(store: ArtifactStore, runId: string): Promise<RetentionPolicy | undefined> {
  const raw = (await storedSettings(store, runId)).retention;
  return raw === undefined ? undefined : RetentionConfig.parse(raw);
}

/**
 * After a step is recorded (recordStep): apply the run's retention, if it has one, to its checkpoints and the
 * recorded step's journals. Undefined when the run keeps everything.
 */
export async function retainAfterStep(store: ArtifactStore, state: Pick<RunStateFile, 'runId' | 'completedStep' | 'checkpoint'>, time: string): Promise<RetentionRecord | undefined> {
  const stored = await storedSettings(store, state.runId);
  if (stored.retention === undefined) return undefined;
  const policy = RetentionConfig.parse(stored.retention);
  const { steps } = await readRunRecords(store, state.runId);
  const input = { runId: state.runId, records: steps, state, policy, ...(stored.asyncLevel !== undefined ? { asyncLevel: stored.asyncLevel } : {}) };
  const plan = planRetention({ ...input, keys: await listForRetention(store, state.runId, [state.completedStep]) });
  return applyRetention(store, { ...input, by: 'run', time }, plan);
}
