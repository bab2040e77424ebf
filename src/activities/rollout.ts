/**
 * The rollout worker's `rollout` activity (task queue `ratchet-rollout`): one
 * episode (src/rollouts/episode.ts), scored (src/rollouts/scoring.ts) and
 * recorded (src/rollouts/record.ts). Returns only the trajectory's reference and
 * a summary. Whatever the agent does in its sandbox ends in a penalty, never a
 * crash; infrastructure failures (inference down, Docker gone, a lost container)
 * throw so Temporal retries, and are dropped, never scored, on the last attempt
 * (src/rollouts/errors.ts). `rolloutChunk` (./rolloutChunk.ts) runs many of them in one
 * activity through the same `runOne`.
 */
import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import { ApplicationFailure } from '@temporalio/common';
import { InferenceUnavailableError, OpenAIModelClient, type ModelClient } from '../agent/model';
import { hostFaultOf, type HostHealth } from '../rollouts/hostHealth';
import { resolveDataset } from '../tasks/load';
import type { ArtifactStore } from '../artifacts/store';
import { asActivityFailure, storeFor } from '../artifacts/stores';
import { fromNewerBuild, newerBuildIssues } from '../config/skew';
import type { RolloutActivities } from '../contracts/activities';
import { RolloutInput, taskIdOf, type ParsedRolloutInput } from '../contracts/rollout';
import type { SandboxManager } from '../sandbox/interface';
import { withPrompt, zeroScore } from '../envs/types';
import { rolloutErrorsTotal, rolloutReward, rolloutSeconds, rolloutsTotal } from '../metrics';
import { isSetupFailed, runEpisode } from '../rollouts/episode';
import { invalidRolloutTask, retryInfrastructureFailure } from '../rollouts/errors';
import { TemplateNotAppendableError } from '../inference/chatTokens';
import { recordRollout, setupFailureOutcome } from '../rollouts/record';
import { scoreEpisode } from '../rollouts/scoring';
import { meterSandboxes } from '../rollouts/cost';
import { isUnscored, type RolloutProvenance, type RolloutSummary } from '../contracts/trajectory';
import { envProvenance } from '../envs/provenance';
import type { AcquireOptions } from '../sandbox/interface';
import { LIVENESS_DEFAULTS } from '../shared/liveness';
import { componentLogger } from '../shared/logger';
import { ReplicaHealth, createReplicaPools } from '../agent/replicaPool';
import { ServedWeights, ServedWeightsMismatch, guardServedWeights } from '../agent/servedWeights';
import { createEnvironmentResolver } from './environments';
import { withLiveness, type Liveness } from './liveness';
import { createChunkActivity } from './rolloutChunk';
import type { RolloutSlots } from '../rollouts/slots';
import type { ChunkActivities } from '../contracts/chunks';

const log = componentLogger('rollout');

export interface RolloutDeps {
  store: ArtifactStore;
  sandboxes: SandboxManager;
  /** The policy client per inference server; defaults to vLLM over the openai package. Tests script their own. */
  openaiFactory?: (baseUrl: string) => ModelClient;
  /** The worker's rollout slots: concurrency counted in rollouts, whether they come one by one or in chunks. */
  slots?: RolloutSlots;
  /** The worker's health: a host fault takes it out of service (absent: faults fail the rollout as any error). */
  health?: HostHealth;
  /** What each replica serves, for full fine-tuning runs (default: asked over HTTP). Tests pass their own. */
  servedWeights?: ServedWeights;
}

/** What the health probe must find again before the host takes work: the image or task file a fault named. */
function probeTargetOf(input: RolloutInput, err: unknown, fault: string): { image?: string; taskFile?: string } {
  const image = /sandbox image (\S+) (?:is )?not found/.exec(fault)?.[1];
  if (image) return { image };
  const task = input.task as { datasetPath?: string } | undefined;
  if ((err as { type?: string }).type === 'TaskReadError' && task?.datasetPath && input.taskSetDir) {
    return { taskFile: resolveDataset(task.datasetPath, input.taskSetDir) };
  }
  return {};
}

export function createRolloutActivities(deps: RolloutDeps) {
  const clients = new Map<string, ModelClient>();
  const clientFor = (baseUrl: string): ModelClient => {
    let c = clients.get(baseUrl);
    if (!c) {
      c = deps.openaiFactory ? deps.openaiFactory(baseUrl) : new OpenAIModelClient(baseUrl);
      clients.set(baseUrl, c);
    }
    return c;
  };
  const environmentFor = createEnvironmentResolver(deps.store);
  // Several replicas: the rollout moves to a live one that serves its version (src/agent/replicaPool.ts).
  const replicaHealth = new ReplicaHealth();
  const pools = createReplicaPools(clientFor, { log, health: replicaHealth });
  // A full run's rollouts sample only from a replica serving their version's weights (src/agent/servedWeights.ts).
  const servedWeights = deps.servedWeights ?? new ServedWeights();
  const modelFor = (input: ParsedRolloutInput): ModelClient => {
    const full = input.fullWeights;
    if (!full) return pools(input.inferenceBaseUrl, input.inferenceBaseUrls);
    const expected = { runId: input.runId, policyVersion: input.policyVersion, ...(full.checkpoint ? { checkpoint: full.checkpoint } : {}) };
    const guarded = (url: string) => guardServedWeights(clientFor(url), url, expected, servedWeights);
    return createReplicaPools(guarded, { log, health: replicaHealth })(input.inferenceBaseUrl, input.inferenceBaseUrls);
  };

  /**
   * One rollout under a liveness the caller owns: the per-rollout code path both activities share
   * (`rollout` gives it its own heartbeat; `rolloutChunk` runs many under the chunk's).
   */
  async function runOne(rawInput: RolloutInput, live: Liveness, attempt?: number): Promise<RolloutSummary> {
    const t0 = performance.now();
    try {
      const summary = await runRollout(parseInput(rawInput), live, attempt);
      rolloutsTotal.inc({ env: rawInput.envId, stop_reason: summary.stop_reason });
      // A dropped rollout (infra_error, setup_error) has no reward to show.
      if (!isUnscored(summary)) rolloutReward.observe({ env: rawInput.envId }, summary.reward);
      rolloutSeconds.observe({ env: rawInput.envId }, (performance.now() - t0) / 1000);
      return summary;
    } catch (err) {
      rolloutErrorsTotal.inc({ env: rawInput.envId ?? 'unknown' });
      // The server's template cannot extend a prompt: every rollout would fail alike, so the step fails loudly.
      if (err instanceof TemplateNotAppendableError) throw invalidRolloutTask(err.message);
      // This host cannot run rollouts (Docker, the sandbox image, its task files): it goes out of service
      // (src/workers/rollout.ts stops polling) and the chunk's retry goes to a healthy host.
      const fault = deps.health ? hostFaultOf(err) : undefined;
      if (fault) {
        deps.health!.markSick(fault, probeTargetOf(rawInput, err, fault));
        throw ApplicationFailure.create({ type: 'RolloutHostUnhealthy', message: `rollout host ${hostname()} is out of service until its health probe passes: ${fault}` });
      }
      // The inference server stopped answering (its health probe): StepRollouts waits for inference.
      if (err instanceof InferenceUnavailableError) throw ApplicationFailure.create({ type: 'InferenceUnavailable', message: err.message });
      // A full run's replica serves other weights (it restarted on the base model): StepRollouts syncs the version, as for a LoRA replica's 404.
      if (err instanceof ServedWeightsMismatch) throw ApplicationFailure.create({ type: 'InferenceUnavailable', message: err.message });
      // Saving the trajectory found its disk full, or the store unreachable: StepRollouts waits
      // (waiting-for-disk, waiting-for-store) without using the rollout's attempts.
      throw asActivityFailure(err);
    }
  }

  function parseInput(rawInput: RolloutInput): ParsedRolloutInput {
    const parsed = RolloutInput.safeParse(rawInput);
    if (!parsed.success) {
      const newer = newerBuildIssues(parsed.error);
      if (newer) throw fromNewerBuild('the rollout input', newer);
      throw ApplicationFailure.nonRetryable(`invalid rollout input: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`, 'InvalidRolloutInput');
    }
    return parsed.data;
  }

  async function rollout(rawInput: RolloutInput): Promise<RolloutSummary> {
    const one = async (): Promise<RolloutSummary> => {
      let windows;
      try {
        windows = parseInput(rawInput).liveness;
      } catch (err) {
        rolloutErrorsTotal.inc({ env: rawInput.envId ?? 'unknown' });
        throw err;
      }
      windows ??= { heartbeat_every_s: LIVENESS_DEFAULTS.heartbeat_every_s, stall_s: LIVENESS_DEFAULTS.rollout_stall_s };
      return withLiveness(
        { name: 'rollout', heartbeatEveryMs: windows.heartbeat_every_s * 1000, stallMs: windows.stall_s * 1000, logger: log },
        (live) => runOne(rawInput, live),
      );
    };
    return deps.slots ? deps.slots.run(one) : one();
  }

  async function runRollout(input: ParsedRolloutInput, live: Liveness, attempt?: number): Promise<RolloutSummary> {
    const started = performance.now();
    // A bad env id, module or prompt variant fails the step loudly (InvalidRolloutTask); a store blip reading the run's config is retried.
    const base = await environmentFor(input.runId, input.envId, input.artifacts);
    let env: typeof base;
    try {
      env = withPrompt(base, input.envArgs);
    } catch (err) {
      throw invalidRolloutTask((err as Error).message);
    }
    const taskId = taskIdOf(input.task);
    const rlog = log.child({ run: input.runId, step: input.step, group: input.groupId, rollout: input.rolloutIndex, env: env.id, task: taskId });
    const store = storeFor(input.artifacts, deps.store);
    // Where the rollout ran, for the step's lineage: both cached per process. Never fails the rollout.
    const provenanceOf = async (acquire: AcquireOptions | undefined): Promise<RolloutProvenance> => {
      const out: RolloutProvenance = {};
      try {
        out.env = envProvenance(env);
      } catch (err) {
        rlog.warn({ err: (err as Error).message }, 'environment sources could not be hashed: the lineage lacks this env');
      }
      if (acquire && deps.sandboxes.imageDigest) {
        try {
          out.image = await deps.sandboxes.imageDigest(acquire);
        } catch (err) {
          rlog.warn({ err: (err as Error).message }, 'sandbox image could not be inspected: the lineage lacks its digest');
        }
      }
      return out;
    };

    // Every container this attempt acquires, and what each cost (the step record's cost.sandbox).
    const sandboxes = meterSandboxes(deps.sandboxes);
    const episode = await runEpisode({ input, env, sandboxes, model: modelFor(input), live, log: rlog, store });
    if (isSetupFailed(episode)) {
      // Dropped by the batch builder (cause task_setup), left out of its group's baseline and the step's reward statistics.
      rlog.warn({ err: episode.setupError }, 'task cannot be set up: rollout recorded as setup_error and dropped');
      const outcome = { ...setupFailureOutcome(taskId, episode.setupError, zeroScore(env.rubric, input.rubric), performance.now() - started), sandbox: sandboxes.cost() };
      return (await recordRollout(store, input, env, { ...outcome, provenance: await provenanceOf(undefined) })).summary;
    }

    const scored = await scoreEpisode({ input, env, episode, sandboxes, live });
    let { result } = episode;
    let { score } = scored;
    const infra = episode.infra ?? scored.infra;
    if (infra !== undefined) {
      retryInfrastructureFailure(infra, rlog, attempt);
      // Out of attempts: keep the record, drop the rollout.
      result = { ...result, stop_reason: 'infra_error', error: infra };
      score = zeroScore(env.rubric, input.rubric);
    }
    const { trajectory, summary } = await recordRollout(store, input, env, {
      taskId: episode.task.instance_id,
      result,
      final: episode.final,
      ...(scored.tests ? { tests: scored.tests } : {}),
      score,
      sandboxMs: episode.sandboxMs + scored.sandboxMs,
      totalMs: performance.now() - started,
      provenance: await provenanceOf(episode.acquire),
      sandbox: sandboxes.cost(),
    });
    rlog.info({ reward: score.total, stop: result.stop_reason, turns: result.turns.length, tool_calls: result.stats.tool_calls, ms: Math.round(trajectory.timing.total_ms) }, 'rollout done');
    return summary;
  }

  const { rolloutChunk } = createChunkActivity({ store: deps.store, runOne, ...(deps.slots ? { slots: deps.slots } : {}) });
  return { rollout, rolloutChunk } satisfies RolloutActivities & ChunkActivities;
}

