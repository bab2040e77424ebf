import { ApplicationFailure } from '@temporalio/common';
import type { ArtifactRef } from '../artifacts/ref';
import type { ArtifactStore } from '../artifacts/store';
import { ConfigError, loadRunConfig } from '../config/load';
import { RunConfig } from '../config/schema';
import { EnvironmentError, loadEnvironment, probeEnvironment, resolveEnvSections } from '../envs/load';
import { resolveConfigPath } from '../shared/paths';
import { loadTasks } from '../tasks/load';
import type { Logger } from '../shared/logger';
import { pickResume, type LoadedConfig, type ResumeState } from '../workflows/types';

export interface ConfigDeps {
  store: ArtifactStore;
  logger: Logger;
}

export const runKeys = {
  config: (runId: string) => `runs/${runId}/config.json`,
  state: (runId: string) => `runs/${runId}/state.json`,
  metrics: (runId: string) => `runs/${runId}/metrics.jsonl`,
};

/** The durable record of the last completed step: what a resumed run starts from. */
export interface RunStateFile extends ResumeState {
  format: 'ratchet.run-state/v1';
  runId: string;
  configSha256: string;
  completedStep: number;
}

const resolveRepoPath = resolveConfigPath;

export function createConfigActivities({ store, logger }: ConfigDeps) {
  /** Reads the state file of a run, if it has completed a step. */
  async function readState(runId: string): Promise<RunStateFile | undefined> {
    const ref = await store.exists(runKeys.state(runId));
    if (!ref) return undefined;
    return store.getJson<RunStateFile>(ref);
  }

  return {
    /**
     * Opens a run: a run id with a completed step resumes from it and keeps the
     * config it started with (the history must record what ran, not what the TOML
     * says today); a new run parses and validates the TOML and stores the parsed
     * config, with paths made absolute, under runs/<run>/config.json.
     */
    async openRun(input: { configPath: string; runId: string }): Promise<{ loaded: LoadedConfig; resume?: ResumeState }> {
      const state = await readState(input.runId);
      if (state) {
        const config = RunConfig.parse(await store.getJson(state.configRef));
        logger.info({ runId: input.runId, completedStep: state.completedStep }, 'resuming run from its last completed step');
        return { loaded: { runId: input.runId, config, configRef: state.configRef, configSha256: state.configSha256 }, resume: pickResume(state) };
      }
      let config: RunConfig;
      try {
        ({ config } = await loadRunConfig(input.configPath));
      } catch (err) {
        // A bad config never fixes itself on retry: fail the run with the message that names the key.
        if (err instanceof ConfigError) throw ApplicationFailure.nonRetryable(err.message, 'ConfigError');
        throw err;
      }
      config.model.path = resolveRepoPath(config.model.path);
      if (config.artifacts.root) config.artifacts.root = resolveRepoPath(config.artifacts.root);
      await checkEnvironmentModules(config);
      const configRef = await store.putJson(runKeys.config(input.runId), config);
      logger.info({ runId: input.runId, configPath: input.configPath, sha256: configRef.sha256 }, 'run config validated and stored');
      return { loaded: { runId: input.runId, config, configRef, configSha256: configRef.sha256 } };
    },

    /** After continue-as-new: the stored config, verified against its recorded hash. */
    async readConfig(ref: ArtifactRef): Promise<RunConfig> {
      return RunConfig.parse(await store.getJson(ref));
    },
  };
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
