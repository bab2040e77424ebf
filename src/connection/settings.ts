/**
 * Which Temporal cluster to talk to, resolved the way every Temporal tool does
 * it (`@temporalio/envconfig`): a `temporal.toml` profile, overridden by the
 * `TEMPORAL_*` variables, overridden by command-line flags; with nothing set,
 * the local dev server (127.0.0.1:7233, namespace `default`).
 *
 * Every value remembers where it came from, so an error can name the setting to
 * fix, and `ratchet doctor` can show the connection without its secrets.
 */
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { loadClientConfig, loadClientConfigProfile, type ClientConfigProfile, type ConfigDataSource } from '@temporalio/envconfig';

export const DEFAULT_ADDRESS = '127.0.0.1:7233';
export const DEFAULT_NAMESPACE = 'default';

/** What the user passed on the command line; wins over the profile and the environment. */
export interface ConnectionFlags {
  address?: string;
  namespace?: string;
  profile?: string;
}

export type PemRole = 'serverCaCert' | 'clientCert' | 'clientKey';

export interface PemSetting {
  /** The bytes to hand to the SDK. */
  data: Buffer;
  /** The file it came from, when it came from one (`*_path`). */
  path?: string;
  /** The setting that produced it, e.g. `TEMPORAL_TLS_SERVER_CA_CERT_PATH`. */
  source: string;
}

export interface TemporalSettings {
  address: string;
  namespace: string;
  apiKey?: string;
  grpcMeta?: Record<string, string>;
  tls: {
    enabled: boolean;
    serverName?: string;
    serverCaCert?: PemSetting;
    clientCert?: PemSetting;
    clientKey?: PemSetting;
  };
  /** The profile in use, when a config file had it. */
  profile?: string;
  /** The config file read, when there was one. */
  configFile?: string;
  /** Where address, namespace, apiKey and tls came from: a flag, a variable, a profile key, or "default". */
  sources: { address: string; namespace: string; apiKey?: string; tls: string };
}

/** A connection setting that cannot work; the message names the setting and the fix. */
export class ConnectionConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConnectionConfigError';
  }
}

type Env = Record<string, string | undefined>;

/** Where envconfig looks for `temporal.toml` on Linux: TEMPORAL_CONFIG_FILE, else $XDG_CONFIG_HOME or ~/.config. */
export function configFilePath(env: Env = process.env): string | undefined {
  if (env.TEMPORAL_CONFIG_FILE) return env.TEMPORAL_CONFIG_FILE;
  if (os.platform() === 'darwin') return env.HOME ? path.join(env.HOME, 'Library', 'Application Support', 'temporalio', 'temporal.toml') : undefined;
  if (os.platform() === 'win32') return env.APPDATA ? path.join(env.APPDATA, 'temporalio', 'temporal.toml') : undefined;
  const dir = env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME) ? env.XDG_CONFIG_HOME : env.HOME ? path.join(env.HOME, '.config') : undefined;
  return dir ? path.join(dir, 'temporalio', 'temporal.toml') : undefined;
}

const FIX_PROFILE = 'Fix: set TEMPORAL_PROFILE (or --profile) to one of the profiles in the file, or unset it to use [profile.default]';

function loadFileProfile(file: string | undefined, profileName: string | undefined, env: Env): ClientConfigProfile {
  if (!file || !existsSync(file)) {
    if (env.TEMPORAL_CONFIG_FILE) {
      throw new ConnectionConfigError(`TEMPORAL_CONFIG_FILE=${env.TEMPORAL_CONFIG_FILE} does not exist. Fix: point it at a temporal.toml, or unset it`);
    }
    if (profileName) {
      throw new ConnectionConfigError(`Temporal profile "${profileName}" was asked for (TEMPORAL_PROFILE or --profile) but there is no config file ` +
        `(looked at ${file ?? '$HOME/.config/temporalio/temporal.toml'}). Fix: create it with \`temporal config set --profile ${profileName} ...\`, ` +
        'set TEMPORAL_CONFIG_FILE, or unset TEMPORAL_PROFILE');
    }
    return {};
  }
  let profiles: Record<string, ClientConfigProfile>;
  try {
    profiles = loadClientConfig({ configSource: { path: file }, configFileStrict: true }).profiles;
  } catch (err) {
    throw new ConnectionConfigError(`${file} is not a valid temporal.toml: ${(err as Error).message}. ` +
      'Fix: correct the file (keys: address, namespace, api_key, [profile.<name>.tls] server_ca_cert_path, client_cert_path, client_key_path, server_name, disabled)');
  }
  const name = profileName ?? 'default';
  const p = profiles[name];
  if (p) return p;
  if (profileName) {
    throw new ConnectionConfigError(`Temporal profile "${profileName}" is not in ${file} (it has: ${Object.keys(profiles).join(', ') || 'no profiles'}). ${FIX_PROFILE}`);
  }
  return {};
}

function readPem(role: PemRole, src: ConfigDataSource | undefined, source: string): PemSetting | undefined {
  if (!src) return undefined;
  if ('path' in src) {
    let data: Buffer;
    try {
      data = readFileSync(src.path);
    } catch (err) {
      throw new ConnectionConfigError(`${source}=${src.path} cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}). ` +
        'Fix: point it at the PEM file, or unset it');
    }
    return { data, path: src.path, source };
  }
  return { data: Buffer.from(src.data), source };
}

/** Parses each PEM now, so a wrong file fails here with its setting's name, not as a TLS alert later. */
function checkPem(role: PemRole, pem: PemSetting | undefined): void {
  if (!pem) return;
  const where = pem.path ? `${pem.source}=${pem.path}` : pem.source;
  try {
    if (role === 'clientKey') createPrivateKey(pem.data);
    else new X509Certificate(pem.data);
  } catch (err) {
    const what = role === 'clientKey' ? 'a PEM private key' : 'a PEM certificate';
    throw new ConnectionConfigError(`${where} is not ${what} (${(err as Error).message}). Fix: point it at the right file`);
  }
}

const ADDRESS_RE = /^(\[[0-9a-fA-F:.]+\]|[^\s:/[\]]+):(\d{1,5})$/;

/**
 * Resolves the connection from flags, TEMPORAL_* variables and the temporal.toml
 * profile (in that order of precedence), then checks it: an address of the form
 * host:port, readable PEM files that parse, a client certificate with its key.
 */
export function resolveTemporalSettings(flags: ConnectionFlags = {}, env: Env = process.env): TemporalSettings {
  const profileName = flags.profile ?? (env.TEMPORAL_PROFILE || undefined);
  const file = configFilePath(env);
  const fileProfile = loadFileProfile(file, profileName, env);
  const usedFile = file && existsSync(file) ? file : undefined;
  const inProfile = (key: string) => `${key} in profile "${profileName ?? 'default'}" of ${usedFile}`;
  // envconfig applies TEMPORAL_* over the file profile; we load it again the same way so the SDK's rules decide.
  const env2: Record<string, string> = Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
  let merged: ClientConfigProfile;
  try {
    merged = loadClientConfigProfile({
      profile: usedFile ? profileName : undefined,
      configSource: usedFile ? { path: usedFile } : undefined,
      disableFile: !usedFile,
      overrideEnvVars: env2,
    });
  } catch (err) {
    throw new ConnectionConfigError(`Temporal connection settings: ${(err as Error).message}. ${FIX_PROFILE}`);
  }

  const from = (flag: string | undefined, flagName: string, envName: string, fileValue: unknown, key: string, fallback = 'default') =>
    flag !== undefined ? flagName : env[envName] !== undefined ? envName : fileValue !== undefined ? inProfile(key) : fallback;

  const address = flags.address ?? merged.address ?? DEFAULT_ADDRESS;
  const namespace = flags.namespace ?? merged.namespace ?? DEFAULT_NAMESPACE;
  const sources: TemporalSettings['sources'] = {
    address: from(flags.address, '--address', 'TEMPORAL_ADDRESS', fileProfile.address, 'address'),
    namespace: from(flags.namespace, '--namespace', 'TEMPORAL_NAMESPACE', fileProfile.namespace, 'namespace'),
    apiKey: merged.apiKey !== undefined ? from(undefined, '', 'TEMPORAL_API_KEY', fileProfile.apiKey, 'api_key') : undefined,
    tls: 'default',
  };
  if (!ADDRESS_RE.test(address)) {
    throw new ConnectionConfigError(`${sources.address}=${JSON.stringify(address)} is not a Temporal address. ` +
      'Fix: host:port, e.g. 127.0.0.1:7233 or my-ns.a1b2c.tmprl.cloud:7233 (no scheme, no path)');
  }

  const tlsCfg = merged.tls;
  const fileTls = fileProfile.tls;
  const pemSource = (role: PemRole, envPath: string, envData: string, key: string): string => {
    if (env[envPath] !== undefined) return envPath;
    if (env[envData] !== undefined) return envData;
    const fileSrc = role === 'serverCaCert' ? fileTls?.serverCACert : role === 'clientCert' ? fileTls?.clientCert : fileTls?.clientKey;
    return inProfile(fileSrc && 'path' in fileSrc ? `tls.${key}_path` : `tls.${key}_data`);
  };
  const serverCaCert = readPem('serverCaCert', tlsCfg?.serverCACert,
    pemSource('serverCaCert', 'TEMPORAL_TLS_SERVER_CA_CERT_PATH', 'TEMPORAL_TLS_SERVER_CA_CERT_DATA', 'server_ca_cert'));
  const clientCert = readPem('clientCert', tlsCfg?.clientCert,
    pemSource('clientCert', 'TEMPORAL_TLS_CLIENT_CERT_PATH', 'TEMPORAL_TLS_CLIENT_CERT_DATA', 'client_cert'));
  const clientKey = readPem('clientKey', tlsCfg?.clientKey,
    pemSource('clientKey', 'TEMPORAL_TLS_CLIENT_KEY_PATH', 'TEMPORAL_TLS_CLIENT_KEY_DATA', 'client_key'));
  checkPem('serverCaCert', serverCaCert);
  checkPem('clientCert', clientCert);
  checkPem('clientKey', clientKey);
  if (Boolean(clientCert) !== Boolean(clientKey)) {
    const [has, lacks] = clientCert ? [clientCert, 'client key (TEMPORAL_TLS_CLIENT_KEY_PATH or tls.client_key_path)'] : [clientKey!, 'client certificate (TEMPORAL_TLS_CLIENT_CERT_PATH or tls.client_cert_path)'];
    throw new ConnectionConfigError(`mTLS needs both halves: ${has.source} is set but the ${lacks} is not. Fix: set both, or neither`);
  }

  // The SDK's rule: TLS is on when the profile has a [tls] table (unless disabled), or when an API key is set.
  const enabled = tlsCfg ? tlsCfg.disabled !== true : merged.apiKey !== undefined;
  if (env.TEMPORAL_TLS !== undefined) sources.tls = 'TEMPORAL_TLS';
  else if (fileTls) sources.tls = inProfile('[tls]');
  else if (tlsCfg) sources.tls = 'TEMPORAL_TLS_*';
  else if (merged.apiKey !== undefined) sources.tls = `on because an API key is set (${sources.apiKey})`;
  if (!enabled && (clientCert || serverCaCert)) {
    throw new ConnectionConfigError(`TLS is disabled (${sources.tls}) but TLS certificates are set (${(clientCert ?? serverCaCert)!.source}). ` +
      'Fix: enable TLS (TEMPORAL_TLS=true) or remove the certificate settings');
  }

  return {
    address,
    namespace,
    apiKey: merged.apiKey,
    grpcMeta: merged.grpcMeta && Object.keys(merged.grpcMeta).length ? merged.grpcMeta : undefined,
    tls: enabled
      ? { enabled, serverName: tlsCfg?.serverName, serverCaCert, clientCert, clientKey }
      : { enabled: false },
    profile: usedFile ? (profileName ?? 'default') : undefined,
    configFile: usedFile,
    sources,
  };
}
