import { ApplicationFailure } from '@temporalio/common';
import { runKeys } from '../artifacts/keys';
import type { ArtifactRef } from '../artifacts/ref';
import type { ArtifactStore } from '../artifacts/store';
import type { StoreSettings } from '../artifacts/settings';
import { storeSettings } from '../config/storeSettings';
import { checkStore, storeFor, storeForRef, withStoreErrors } from '../artifacts/stores';
import { ConfigError, loadRunConfig } from '../config/load';
import { type ArtifactsConfig, type RunConfig, storedRunConfig } from '../config/schema';
import { EnvironmentError, loadEnvironment, probeEnvironment, resolveEnvSections } from '../envs/load';
import { withPrompt } from '../envs/types';
import { type FetchLike, logprobsModeProblem, probeLogprobsMode, processedLogprobsReason } from '../check/logprobsMode';
import { resolveConfigPath } from '../shared/paths';
import { checkEvalSection, configTaskset } from '../evals/tasksets';
import { loadTasks } from '../tasks/load';
import type { Logger } from '../shared/logger';
import { readRunState } from '../records/runRecords';
import { InitFromError, resolveInitFrom } from '../records/initFrom';
import { pickResume, type RunStateFile, type ConfigActivities, type LoadedConfig, type ResumeState } from '../contracts';

export interface ConfigDeps {
  store: ArtifactStore;
  logger: Logger;
  /** How the inference probe reaches the servers (tests give a fake); default: fetch. */
  inferenceFetch?: FetchLike;
}

const resolveRepoPath = resolveConfigPath;

export function createConfigActivities({ store, logger, inferenceFetch }: ConfigDeps) {
  /**
   * A run that samples at T != 1 or with top-k/top-p needs each server's processed logprobs:
   * one that answers with raw logprobs (or none) fails the run now, with the fix. A server that
   * does not answer yet, or an unclear answer, is logged and the run goes on (it waits for
   * inference later; `ratchet check` reports it too).
   */
  async function checkInferenceLogprobs(runId: string, config: RunConfig): Promise<void> {
    const reason = processedLogprobsReason(config.sampling);
    if (!reason) return;
    const probes = await Promise.all(config.inference.base_urls.map(async (url) =>
      ({ url, probe: await probeLogprobsMode(url, config.inference.served_model, { fetch: inferenceFetch }) })));
    for (const [i, { url, probe }] of probes.entries()) {
      const problem = logprobsModeProblem(probe, `inference.base_urls[${i}] ${url}`, reason);
      if (problem) throw ApplicationFailure.nonRetryable(problem, 'InferenceLogprobsMode');
      if (probe.kind === 'unreachable' || probe.kind === 'inconclusive') {
        logger.warn({ runId, url, probe: probe.kind, detail: probe.detail }, 'could not check that the inference server returns processed logprobs');
      }
    }
  }

  /** Reads the state file of a run, if it has completed a step. */
  async function readState(runStore: ArtifactStore, runId: string): Promise<RunStateFile | undefined> {
    // The winning state record (0.6 on), or state.json of a run from before.
    return readRunState(runStore, runId);
  }

  return {
    /**
     * Opens a run: a run id with a completed step resumes from it and keeps the
     * config it started with (the history must record what ran, not what the TOML
     * says today); a new run parses and validates the TOML, checks its artifact
     * store answers (bucket, credentials), and stores the parsed config, with
     * paths made absolute, under runs/<run>/config.json in that store.
     */
    async openRun(input: { configPath: string; runId: string; initFrom?: string }): Promise<{ loaded: LoadedConfig; resume?: ResumeState }> {
      return withStoreErrors(async () => {
        let config: RunConfig | undefined;
        let configError: ConfigError | undefined;
        try {
          ({ config } = await loadRunConfig(input.configPath));
        } catch (err) {
          if (!(err instanceof ConfigError)) throw err;
          configError = err;
        }
        // The TOML names the store; a run that already started resumes from the state in it.
        const settings = config ? storeSettings(resolveArtifactPaths(config.artifacts)) : undefined;
        const runStore = storeFor(settings, store);
        if (config) await checkStore(runStore);
        const state = await readState(runStore, input.runId);
        if (state) {
          const stored = storedRunConfig(await runStore.getJson(state.configRef));
          await checkInferenceLogprobs(input.runId, stored);
          logger.info({ runId: input.runId, completedStep: state.completedStep, store: runStore.url }, 'resuming run from its last completed step');
          return { loaded: { runId: input.runId, config: stored, configRef: state.configRef, configSha256: state.configSha256 }, resume: pickResume({ ...state, artifacts: settings }) };
        }
        // A bad config never fixes itself on retry: fail the run with the message that names the key.
        if (!config) throw ApplicationFailure.nonRetryable(configError!.message, 'ConfigError');
        config.model.path = resolveRepoPath(config.model.path);
        if (input.initFrom !== undefined) config.model.init_from = input.initFrom;
        config.artifacts = resolveArtifactPaths(config.artifacts);
        await checkEnvironmentModules(config);
        await checkEvalTaskset(input.configPath, config);
        await checkInferenceLogprobs(input.runId, config);
        if (config.model.init_from !== undefined) {
          // Resolved and verified now, before anything starts; stored with the config so every later execution has it.
          try {
            config.model.init = await resolveInitFrom(runStore, config, input.runId);
          } catch (err) {
            if (err instanceof InitFromError) throw ApplicationFailure.nonRetryable(`${input.configPath}: ${err.message}`, 'ConfigError');
            throw err;
          }
          logger.info({ runId: input.runId, initFrom: config.model.init.from, checkpoint: config.model.init.checkpoint.uri }, 'run starts from another run\'s adapter');
        }
        const configRef = await runStore.putJson(runKeys.config(input.runId), config);
        logger.info({ runId: input.runId, configPath: input.configPath, sha256: configRef.sha256, store: runStore.url }, 'run config validated and stored');
        return { loaded: { runId: input.runId, config, configRef, configSha256: configRef.sha256 } };
      });
    },

    /** After continue-as-new: the stored config, verified against its recorded hash, from the run's store. */
    async readConfig(ref: ArtifactRef, artifacts?: StoreSettings): Promise<RunConfig> {
      return withStoreErrors(async () => storedRunConfig(await storeForRef(ref, artifacts, store).getJson(ref)));
    },
  } satisfies ConfigActivities;
}

function resolveArtifactPaths(a: ArtifactsConfig): ArtifactsConfig {
  return a.root ? { ...a, root: resolveRepoPath(a.root) } : a;
}

/**
 * With an in-run eval cadence ([eval] every_steps > 0), its task set must load now, not at the first
 * sweep: a path becomes absolute in the stored config (as env datasets do), and a problem fails the run
 * naming eval.taskset (or eval.k) with the fix.
 */
async function checkEvalTaskset(configPath: string, config: RunConfig): Promise<void> {
  config.eval = { ...config.eval, taskset: configTaskset(config.eval.taskset) };
  const found = await checkEvalSection(config.eval);
  if (found && 'problem' in found) throw ApplicationFailure.nonRetryable(`invalid run config\n${configPath}: ${found.problem}`, 'ConfigError');
}

/**
 * Environments from modules are loaded and tried here, once, before any
 * rollout: a missing export, a tool without a schema or a reward that is not a
 * number fails the run now, naming the module, instead of every rollout later.
 * Their module and dataset paths become absolute in the stored config.
 */
async function checkEnvironmentModules(config: RunConfig): Promise<void> {
  try {
    resolveEnvSections(config.env);
    for (const e of config.env) {
      // A prompt variant the environment lacks fails the run now, not its first rollout.
      if (e.args.prompt !== undefined) withPrompt(loadEnvironment({ id: e.id, module: e.module }), e.args);
      if (e.module === undefined) continue;
      const env = loadEnvironment({ id: e.id, module: e.module });
      const first = (await loadTasks(e.dataset)).tasks[0];
      if (!first) throw new EnvironmentError(e.module, [`its dataset ${e.dataset} has no tasks`]);
      probeEnvironment(env, first, e.module);
    }
  } catch (err) {
    throw ApplicationFailure.nonRetryable((err as Error).message, err instanceof EnvironmentError ? 'EnvironmentError' : 'ConfigError');
  }
}
