/**
 * Open runs on the pre-0.6 per-rollout fan-out (docs/upgrades.md, "The per-rollout fan-out"): their
 * stored config says orchestrator.rollouts_per_chunk = 0, or has no such key (stored before 0.6).
 * Such a run's history holds TrainRun's inline tasks and per-rollout StepRollouts children, which a
 * build without that path cannot replay in place: it must finish, or be terminated and restarted
 * (`ratchet restart`) on the new build, from its last completed step, in chunks. `ratchet upgrade` lists them.
 */
import type { Client } from '@temporalio/client';
import { runKeys } from '../artifacts/keys';
import type { ArtifactStore } from '../artifacts/store';
import { runStore } from './runStore';

export interface PerRolloutRun {
  run: string;
  why: 'rollouts_per_chunk = 0' | 'stored before 0.6 (no rollouts_per_chunk)';
}

/** Why a stored config runs the per-rollout fan-out; undefined when it runs chunks (or cannot be read). */
export function perRolloutReason(stored: unknown): PerRolloutRun['why'] | undefined {
  // Only the one key: a config a newer build stored must not fail here.
  const o = (stored as { orchestrator?: { rollouts_per_chunk?: unknown } } | undefined)?.orchestrator;
  if (!o) return undefined;
  if (o.rollouts_per_chunk === 0) return 'rollouts_per_chunk = 0';
  return o.rollouts_per_chunk === undefined ? 'stored before 0.6 (no rollouts_per_chunk)' : undefined;
}

/** Running TrainRuns whose stored config runs the per-rollout fan-out. `storeOf` finds a run's store (its memo's [artifacts]). */
export async function openPerRolloutRuns(
  client: Client,
  storeOf: (run: string) => Promise<ArtifactStore> = (run) => runStore(run, { client: async () => client }),
): Promise<PerRolloutRun[]> {
  const out: PerRolloutRun[] = [];
  for await (const wf of client.workflow.list({ query: "WorkflowType = 'TrainRun' AND ExecutionStatus = 'Running'" })) {
    const text = await (await storeOf(wf.workflowId)).read(runKeys.config(wf.workflowId)).catch(() => undefined);
    if (!text) continue;
    let stored: unknown;
    try {
      stored = JSON.parse(text.toString('utf8'));
    } catch {
      continue;
    }
    const why = perRolloutReason(stored);
    if (why) out.push({ run: wf.workflowId, why });
  }
  return out;
}
