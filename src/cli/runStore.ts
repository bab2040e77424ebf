/**
 * Where a run's artifacts live, for the CLI commands that read them (`ratchet eval`,
 * `ratchet report`): the [artifacts] section of --config when given, else the
 * settings the TrainRun recorded in its memo (the run's own store cannot say where
 * the store is), else undefined: the default store (RATCHET_ARTIFACTS_URL or the
 * local directory). Settings only; credentials come from the environment.
 */
import type { Client } from '@temporalio/client';
import type { StoreSettings } from '../artifacts/settings';
import { storeSettings } from '../config/storeSettings';
import type { ArtifactStore } from '../artifacts/store';
import { defaultStore, storeFor } from '../artifacts/stores';
import { loadRunConfig } from '../config/load';
import { CliError, EXIT } from './exit';
import { connectClient, type TemporalOptions } from './temporal';

/** The [artifacts] settings a TrainRun recorded in its memo; undefined for a run on the default store or no workflow. */
export async function recordedArtifacts(client: Client, run: string): Promise<StoreSettings | undefined> {
  try {
    const memo = (await client.workflow.getHandle(run).describe()).memo as { artifacts?: StoreSettings } | undefined;
    return memo?.artifacts && (memo.artifacts.url || memo.artifacts.root) ? memo.artifacts : undefined;
  } catch {
    return undefined; // no such workflow (or history gone): the caller's not-found check reports it
  }
}

/** The [artifacts] settings of a run config file; a bad file is a usage error naming --config. */
export async function configArtifacts(configPath: string): Promise<StoreSettings | undefined> {
  let config;
  try {
    config = (await loadRunConfig(configPath)).config;
  } catch (err) {
    throw new CliError(`--config: ${(err as Error).message}`, EXIT.invalidInput);
  }
  return storeSettings(config.artifacts);
}

/**
 * --config's settings, else the run's memo (through `client()`, which may give undefined
 * when no Temporal server is reachable: a report can be written from the store alone).
 */
export async function runArtifacts(run: string, opts: { config?: string; client: () => Promise<Client | undefined> }): Promise<StoreSettings | undefined> {
  if (opts.config) return configArtifacts(opts.config);
  const client = await opts.client();
  return client ? recordedArtifacts(client, run) : undefined;
}

/** The store that holds `run`: runArtifacts' settings, else the default store. */
export async function runStore(run: string, opts: { config?: string; client: () => Promise<Client | undefined> }): Promise<ArtifactStore> {
  return storeFor(await runArtifacts(run, opts), defaultStore());
}

/**
 * runArtifacts for a command that can do without Temporal (`report`, `replay-step`): --config,
 * else the run's memo when a server answers, else undefined (the default store).
 */
export async function runArtifactsIfReachable(run: string, config: string | undefined, temporal: TemporalOptions): Promise<StoreSettings | undefined> {
  if (config) return configArtifacts(config);
  let connected;
  try {
    connected = await connectClient(temporal);
  } catch {
    return undefined;
  }
  try {
    return await recordedArtifacts(connected.client, run);
  } finally {
    await connected.close();
  }
}
