/**
 * `[model] init_from`: a run that starts from another run's adapter (an SftRun's last checkpoint,
 * or any run's step checkpoint). Resolved when the run opens, before anything starts: the origin
 * run's state ("<run>") or its winning step record ("<run>@<step>") names a checkpoint and adapter
 * by sha256; both are verified (every file against its manifest, as the checkpoint fallback does),
 * and the checkpoint's trainer_state.json must be of the same base model and LoRA shape. Every
 * problem is an InitFromError naming the key, what is wrong and the fix.
 */
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { runKeys } from '../artifacts/keys';
import type { ArtifactStore } from '../artifacts/store';
import { INIT_FROM_RE, type InitResolved, type RunConfig } from '../config/schema';
import { checkpointProblem } from './fallback';
import { readRunRecords, readRunState } from './runRecords';

export class InitFromError extends Error {
  constructor(message: string) {
    super(`model.init_from: ${message}`);
    this.name = 'InitFromError';
  }
}

/** "<run>" or "<run>@<step>". */
export function parseInitFrom(spec: string): { runId: string; step?: number } {
  const m = INIT_FROM_RE.exec(spec);
  if (!m) throw new InitFromError(`"${spec}" is not "<run id>" or "<run id>@<step>". Fix: e.g. init_from = "sft-1" or "sft-1@3"`);
  return { runId: m[1]!, ...(m[2] !== undefined ? { step: Number(m[2]) } : {}) };
}

/** What a checkpoint's tensors must agree on to start this run: the base model and the LoRA shape. */
export interface AdapterIdentity {
  path: string | null;
  mode: string;
  rank?: number;
  alpha?: number;
  target_modules?: string[];
}

/** The identity of the run config's trainer (model.path as the trainer gets it: src/workflows/trainerConfig.ts). */
export function configIdentity(config: RunConfig): AdapterIdentity {
  const l = config.trainer.lora;
  return { path: config.model.path, mode: config.trainer.mode, rank: l.rank, alpha: l.alpha, target_modules: [...l.target_modules] };
}

/** The identity a checkpoint's trainer_state.json records (older checkpoints keep lora under model). */
export function checkpointIdentity(state: { trainer_config?: Record<string, unknown> }): AdapterIdentity {
  const t = (state.trainer_config ?? {}) as { mode?: string; lora?: Record<string, unknown>; model?: { path?: string | null; lora?: Record<string, unknown> } };
  const mode = t.mode ?? 'lora';
  const lora = (t.model?.lora ?? t.lora ?? {}) as { rank?: number; alpha?: number; target_modules?: string[] };
  return { path: t.model?.path ?? null, mode, rank: lora.rank, alpha: lora.alpha, target_modules: lora.target_modules ? [...lora.target_modules] : undefined };
}

/** "key: checkpoint's vs this run's" for each difference; empty when the adapter fits. Dropout may differ (not in the weights). */
export function identityDiffs(saved: AdapterIdentity, want: AdapterIdentity): string[] {
  const out: string[] = [];
  const show = (v: unknown) => JSON.stringify(v);
  if (saved.path !== want.path) out.push(`base model (model.path) ${show(saved.path)} vs this run's ${show(want.path)}`);
  if (saved.mode !== want.mode) out.push(`trainer.mode ${show(saved.mode)} vs ${show(want.mode)}`);
  for (const k of ['rank', 'alpha'] as const) {
    if (saved[k] !== want[k]) out.push(`trainer.lora.${k} ${show(saved[k])} vs ${show(want[k])}`);
  }
  const a = [...(saved.target_modules ?? [])].sort();
  const b = [...(want.target_modules ?? [])].sort();
  if (show(a) !== show(b)) out.push(`trainer.lora.target_modules ${show(saved.target_modules)} vs ${show(want.target_modules)}`);
  return out;
}

/** Resolves and verifies `config.model.init_from` in `store` (this run's). */
export async function resolveInitFrom(store: ArtifactStore, config: RunConfig, newRunId?: string): Promise<InitResolved> {
  const spec = config.model.init_from!;
  const { runId, step } = parseInitFrom(spec);
  if (config.trainer.mode !== 'lora') {
    throw new InitFromError(`starts the run from another run's LoRA adapter, but trainer.mode is "${config.trainer.mode}". Fix: trainer.mode = "lora", or no init_from`);
  }
  if (runId === newRunId) throw new InitFromError(`"${spec}" names this run itself. Fix: name the run to start from (an SftRun's id, say)`);
  if (!(await store.exists(runKeys.config(runId)))) {
    throw new InitFromError(`run "${runId}" is not in this run's artifact store (${store.url}: no ${runKeys.config(runId)}). ` +
      'Fix: check the run id (`ratchet status`), or give this run the same [artifacts] store as that run');
  }
  let found: { step: number; policy_version: number; checkpoint?: InitResolved['checkpoint']; adapter?: InitResolved['adapter'] };
  if (step === undefined) {
    const state = await readRunState(store, runId);
    if (!state || !state.checkpoint) {
      throw new InitFromError(`run "${runId}" has no checkpoint yet (${state ? `its last completed step ${state.completedStep} trained nothing` : 'no step completed'}). ` +
        'Fix: wait for a step of it to finish, or name another run');
    }
    found = { step: state.completedStep, policy_version: state.policyVersion, checkpoint: state.checkpoint, adapter: state.adapter };
  } else {
    const { steps } = await readRunRecords(store, runId);
    const r = steps.find((s) => s.step === step);
    if (!r) {
      const have = steps.filter((s) => s.checkpoint && !s.error).map((s) => s.step);
      throw new InitFromError(`run "${runId}" has no step ${step} (steps with a checkpoint: ${have.length ? have.join(', ') : 'none'}). Fix: name one of those`);
    }
    if (r.error || !r.checkpoint) {
      throw new InitFromError(`step ${step} of run "${runId}" saved no checkpoint of its own (${r.error ? `${r.error.type}: ${r.error.message.slice(0, 200)}` : 'none recorded'}). ` +
        'Fix: name a step that trained');
    }
    found = { step, policy_version: r.policy_version, checkpoint: r.checkpoint, adapter: r.adapter };
  }
  const at = `${runId}@${found.step}`;
  if (!found.adapter) {
    throw new InitFromError(`the checkpoint of ${at} has no LoRA adapter (trained with trainer.mode = "full"?). Fix: start from a LoRA run`);
  }
  const problem = await checkpointProblem(store, found);
  if (problem !== undefined) {
    throw new InitFromError(`the checkpoint of ${at} does not verify: ${problem}. Fix: name an earlier step ("${runId}@<step>") whose checkpoint is sound`);
  }
  const root = await store.localDir(found.checkpoint!);
  let state: { trainer_config?: Record<string, unknown> };
  try {
    state = JSON.parse(await fs.readFile(path.join(root, 'trainer_state.json'), 'utf8')) as typeof state;
  } catch (err) {
    throw new InitFromError(`the checkpoint of ${at} (${found.checkpoint!.uri}) has no readable trainer_state.json: ${(err as Error).message}`);
  }
  const diffs = identityDiffs(checkpointIdentity(state), configIdentity(config));
  if (diffs.length) {
    throw new InitFromError(`the adapter of ${at} was trained for another model or LoRA shape: ${diffs.join('; ')}. ` +
      'Fix: use that run\'s [model] path and [trainer.lora] rank, alpha and target_modules, or start from another run');
  }
  return { from: spec, run_id: runId, step: found.step, policy_version: found.policy_version, checkpoint: found.checkpoint!, adapter: found.adapter };
}
