/**
 * One way to reach Temporal for every Ratchet process: the CLI, the TS workers,
 * doctor, benchmarks. Resolves the profile, checks it, and builds the SDK's
 * connection options and data converter (with the payload codec when a key is set).
 */
import type { DataConverter } from '@temporalio/common';
import { codecFromEnv, type AesGcmCodec } from './codec';
import { sdkConnectionOptions, type SdkConnectionOptions } from './connect';
import { resolveTemporalSettings, type ConnectionFlags, type TemporalSettings } from './settings';

export { AesGcmCodec, codecFromEnv, defaultKeyId, parseKey } from './codec';
export { classifyConnectError, describeSettings, describeSettingsLine, explainConnectError, explainConnectFailure, probeEndpoint, sdkConnectionOptions } from './connect';
export { ConnectionConfigError, DEFAULT_ADDRESS, DEFAULT_NAMESPACE, configFilePath, resolveTemporalSettings } from './settings';
export type { ConnectionFlags, TemporalSettings } from './settings';

export interface ResolvedConnection {
  settings: TemporalSettings;
  connectionOptions: SdkConnectionOptions;
  codec?: AesGcmCodec;
  /** For Client and Worker.create; empty when no codec is configured. */
  dataConverter: DataConverter;
}

/** Everything a process needs to connect; throws ConnectionConfigError (naming the setting) before any network call. */
export function resolveConnection(flags: ConnectionFlags = {}, env: Record<string, string | undefined> = process.env): ResolvedConnection {
  const settings = resolveTemporalSettings(flags, env);
  const codec = codecFromEnv(env);
  return {
    settings,
    connectionOptions: sdkConnectionOptions(settings),
    codec,
    dataConverter: codec ? { payloadCodecs: [codec] } : {},
  };
}
