/**
 * The environment a run's `[[env]].id` names, for the workers that run or score
 * its episodes: a module when the run's stored config names one, else the
 * built-in. The config lives in the run's own store (an s3:// run shares no disk
 * with the worker); it is read once per run and process.
 */
import type { ArtifactStore } from '../artifacts/store';
import { storeFor, type StoreSettings } from '../artifacts/stores';
import { z } from 'zod';
import { loadEnvironment } from '../envs/load';
import { ENVIRONMENTS } from '../envs/registry';
import type { Environment } from '../envs/types';
import { runKeys } from '../artifacts/keys';
import { nonRetryable } from '../rollouts/errors';

/**
 * What this resolver reads of the stored run config, and nothing else: the main worker validated the
 * whole config when it stored it, and a run stored by a newer build (a key this worker does not know,
 * in any section) must not fail here (version skew, docs/upgrades.md).
 */
const StoredEnvs = z.object({
  env: z.array(z.object({ id: z.string().min(1), module: z.string().min(1).optional() }).passthrough()).default([]),
}).passthrough();

export type EnvironmentResolver = (runId: string, envId: string, artifacts?: StoreSettings) => Promise<Environment>;

export function createEnvironmentResolver(defaultStore: ArtifactStore): EnvironmentResolver {
  const runEnvModules = new Map<string, Promise<Map<string, string>>>();
  return async (runId, envId, artifacts) => {
    const builtin = (ENVIRONMENTS as Record<string, Environment>)[envId];
    let modules = runEnvModules.get(runId);
    if (!modules) {
      modules = (async () => {
        const runStore = storeFor(artifacts, defaultStore);
        // A store error here is not bad input: it is retried (StoreUnavailable: the step waits for the store).
        const ref = await runStore.exists(runKeys.config(runId));
        const stored = ref ? await runStore.getJson(ref) : undefined;
        const config = ref ? await nonRetryable(async () => StoredEnvs.parse(stored)) : undefined;
        return new Map((config?.env ?? []).flatMap((e) => (e.module ? [[e.id, e.module] as [string, string]] : [])));
      })();
      runEnvModules.set(runId, modules);
      modules.catch(() => runEnvModules.delete(runId));
    }
    const module = (await modules).get(envId);
    if (module === undefined && builtin) return builtin;
    // A bad env id or module is the run's input, the same for every rollout: it fails the step loudly.
    return nonRetryable(async () => loadEnvironment({ id: envId, module }));
  };
}
