/**
 * The environment a run's `[[env]].id` names, for the workers that run or score
 * its episodes: a module when the run's stored config names one, else the
 * built-in. The config lives in the run's own store (an s3:// run shares no disk
 * with the worker); it is read once per run and process.
 */
import type { ArtifactStore } from '../artifacts/store';
import { storeFor, type StoreSettings } from '../artifacts/stores';
import { RunConfig } from '../config/schema';
import { loadEnvironment } from '../envs/load';
import { ENVIRONMENTS } from '../envs/registry';
import type { Environment } from '../envs/types';
import { runKeys } from '../artifacts/keys';

export type EnvironmentResolver = (runId: string, envId: string, artifacts?: StoreSettings) => Promise<Environment>;

export function createEnvironmentResolver(defaultStore: ArtifactStore): EnvironmentResolver {
  const runEnvModules = new Map<string, Promise<Map<string, string>>>();
  return async (runId, envId, artifacts) => {
    const builtin = (ENVIRONMENTS as Record<string, Environment>)[envId];
    let modules = runEnvModules.get(runId);
    if (!modules) {
      modules = (async () => {
        const runStore = storeFor(artifacts, defaultStore);
        const ref = await runStore.exists(runKeys.config(runId));
        const config = ref ? RunConfig.parse(await runStore.getJson(ref)) : undefined;
        return new Map((config?.env ?? []).flatMap((e) => (e.module ? [[e.id, e.module] as [string, string]] : [])));
      })();
      runEnvModules.set(runId, modules);
      modules.catch(() => runEnvModules.delete(runId));
    }
    const module = (await modules).get(envId);
    if (module === undefined && builtin) return builtin;
    return loadEnvironment({ id: envId, module });
  };
}
