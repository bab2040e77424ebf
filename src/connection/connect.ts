/**
 * From resolved settings to SDK connection options, a one-line summary without
 * secrets, and connect failures turned into errors that name the setting to fix.
 * Used by the TS workers (NativeConnection) and the CLI (Connection) alike: both
 * take the same { address, tls, apiKey, metadata }.
 */
import { connect as netConnect, isIP } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { TLSConfig } from '@temporalio/common/lib/internal-non-workflow';
import type { TemporalSettings } from './settings';

export interface SdkConnectionOptions {
  address: string;
  tls?: TLSConfig | boolean;
  apiKey?: string;
  metadata?: Record<string, string>;
}

export function sdkConnectionOptions(s: TemporalSettings): SdkConnectionOptions {
  const opts: SdkConnectionOptions = { address: s.address };
  if (s.tls.enabled) {
    const tls: TLSConfig = {};
    if (s.tls.serverName) tls.serverNameOverride = s.tls.serverName;
    if (s.tls.serverCaCert) tls.serverRootCACertificate = s.tls.serverCaCert.data;
    if (s.tls.clientCert && s.tls.clientKey) tls.clientCertPair = { crt: s.tls.clientCert.data, key: s.tls.clientKey.data };
    opts.tls = Object.keys(tls).length ? tls : true;
  }
  if (s.apiKey !== undefined) opts.apiKey = s.apiKey;
  if (s.grpcMeta) opts.metadata = s.grpcMeta;
  return opts;
}

/** Safe to log and print: names files and sources, never key material or the API key. */
export function describeSettings(s: TemporalSettings): Record<string, string> {
  const out: Record<string, string> = {
    address: `${s.address} (${s.sources.address})`,
    namespace: `${s.namespace} (${s.sources.namespace})`,
    profile: s.configFile ? `${s.profile ?? 'default'} from ${s.configFile}` : 'none (no temporal.toml)',
  };
  if (!s.tls.enabled) out.tls = 'off';
  else {
    const parts = [`on (${s.sources.tls})`];
    parts.push(s.tls.serverCaCert ? `server CA ${s.tls.serverCaCert.path ?? s.tls.serverCaCert.source}` : 'system CAs');
    if (s.tls.clientCert) parts.push(`client cert ${s.tls.clientCert.path ?? s.tls.clientCert.source} (mTLS)`);
    if (s.tls.serverName) parts.push(`server name ${s.tls.serverName}`);
    out.tls = parts.join(', ');
  }
  if (s.apiKey !== undefined) out.apiKey = `set (${s.sources.apiKey})`;
  return out;
}

export function describeSettingsLine(s: TemporalSettings): string {
  const d = describeSettings(s);
  return `${d.address}, namespace ${d.namespace}, TLS ${d.tls}, profile ${d.profile}${d.apiKey ? `, API key ${d.apiKey}` : ''}`;
}

export type ConnectFailure = 'unreachable' | 'tls-untrusted' | 'tls-hostname' | 'tls-client-cert' | 'tls-to-plaintext' | 'plaintext-to-tls' | 'auth' | 'other';

/** Recognises the failure from the messages of grpc-js (client) and the Rust core (worker). */
export function classifyConnectError(err: unknown): ConnectFailure {
  const m = `${(err as Error)?.message ?? ''} ${String((err as { cause?: unknown })?.cause ?? '')} ${String((err as { details?: unknown })?.details ?? '')}`;
  if (/UnknownIssuer|unable to get (local )?issuer|self[- ]signed certificate|unable to verify the first certificate|certificate signature failure|BadSignature|invalid peer certificate|certificate verify failed|UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT|UNABLE_TO_GET_ISSUER_CERT/i.test(m)) {
    if (/NotValidForName|altnames|hostname|does not match/i.test(m)) return 'tls-hostname';
    return 'tls-untrusted';
  }
  if (/NotValidForName|altnames|Hostname\/IP does not match|ERR_TLS_CERT_ALTNAME_INVALID/i.test(m)) return 'tls-hostname';
  if (/certificate required|CertificateRequired|bad certificate|BadCertificate|handshake failure|alert (number )?4[0-9]|peer sent no certificates|CERTIFICATE_REQUIRED|client certificate rejected/i.test(m)) return 'tls-client-cert';
  if (/wrong version number|InvalidContentType|CorruptMessage|packet length too long|received corrupt message|record overflow/i.test(m)) return 'tls-to-plaintext';
  if (/UNAUTHENTICATED|PERMISSION_DENIED|Request unauthorized|unauthorized/i.test(m)) return 'auth';
  if (/ECONNREFUSED|Connection refused|ENOTFOUND|EAI_AGAIN|failed to lookup|Name or service not known|EHOSTUNREACH|ENETUNREACH|No route to host|tcp connect error|Deadline exceeded|DEADLINE_EXCEEDED|timed out|timeout/i.test(m)) return 'unreachable';
  // A plaintext client talking to a TLS port sees the connection closed mid-HTTP/2 handshake.
  if (/Connection dropped|connection closed|Protocol error|http2 error|frame with invalid size|ECONNRESET|broken pipe|transport error/i.test(m)) return 'plaintext-to-tls';
  return 'other';
}

/** An error message naming the setting and the fix, for a failed connect to Temporal. */
export function explainConnectError(err: unknown, s: TemporalSettings): string {
  const raw = ((err as Error)?.message ?? String(err)).split('\n')[0]!.slice(0, 300);
  const kind = classifyConnectError(err);
  const at = `Temporal at ${s.address} (address from ${s.sources.address})`;
  switch (kind) {
    case 'tls-untrusted': {
      const ca = s.tls.serverCaCert;
      return `TLS: ${at} presented a certificate that ${ca ? `the CA in ${ca.source}${ca.path ? `=${ca.path}` : ''}` : 'the system CAs'} does not trust (${raw}). ` +
        `Fix: set ${ca ? ca.source : 'TEMPORAL_TLS_SERVER_CA_CERT_PATH (or tls.server_ca_cert_path in the profile)'} to the CA that signed the server's certificate`;
    }
    case 'tls-hostname':
      return `TLS: ${at} presented a certificate for another host name (${raw}). ` +
        'Fix: connect by a name in the certificate, or set TEMPORAL_TLS_SERVER_NAME (tls.server_name) to one';
    case 'tls-client-cert':
      return `TLS: ${at} rejected the client certificate${s.tls.clientCert ? ` from ${s.tls.clientCert.source}` : ' (none was sent)'} (${raw}). ` +
        'Fix: set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH (tls.client_cert_path, tls.client_key_path) to a pair the server\'s client CA signed';
    case 'tls-to-plaintext':
      return `TLS is on (${s.sources.tls}) but ${at} does not speak TLS (${raw}). Fix: turn TLS off (unset the [tls] settings or TEMPORAL_TLS=false), or use the server's TLS port`;
    case 'plaintext-to-tls':
      return s.tls.enabled
        ? `${at} closed the connection during the handshake (${raw}). Fix: check the server's TLS settings (does it require a client certificate?) and ${s.sources.address}`
        : `TLS is off but ${at} closed the connection (${raw}); it may require TLS. Fix: TEMPORAL_TLS=true (or a [tls] table in the profile) with the server's CA`;
    case 'auth':
      return `${at} refused the credentials (${raw}). Fix: check TEMPORAL_API_KEY (api_key) or the client certificate, and that they allow namespace "${s.namespace}" (${s.sources.namespace})`;
    case 'unreachable':
      return `cannot reach ${at}: ${raw}. Fix: start it (\`ratchet up\` or \`bash infra/temporal.sh start\` for the local dev server), ` +
        'or point TEMPORAL_ADDRESS / the profile\'s address / --address at the right host:port';
    default:
      return `cannot connect to ${at}: ${raw}. Fix: check ${s.sources.address} and the TLS settings (${s.sources.tls}); \`ratchet doctor\` shows the connection in use`;
  }
}

/**
 * grpc-js (the CLI's client) reports most failures as "Failed to connect before the
 * deadline", hiding why. A plain TCP connect, then a TLS handshake with the same CA,
 * client pair and server name, recovers the reason: refused, untrusted, wrong name,
 * client certificate rejected.
 */
export async function probeEndpoint(s: TemporalSettings, timeoutMs = 3000): Promise<Error | undefined> {
  const [, host, port] = s.address.match(/^\[?(.*?)\]?:(\d+)$/) ?? [];
  const tlsOpts = s.tls.enabled ? {
    ca: s.tls.serverCaCert?.data, cert: s.tls.clientCert?.data, key: s.tls.clientKey?.data,
    servername: s.tls.serverName ?? (isIP(host!) ? undefined : host), ALPNProtocols: ['h2'],
  } : undefined;
  return new Promise((resolve) => {
    let settled = false;
    const done = (e: Error | undefined) => { if (!settled) { settled = true; sock.destroy(); resolve(e); } };
    const sock = tlsOpts ? tlsConnect({ host, port: Number(port), ...tlsOpts }) : netConnect({ host, port: Number(port) });
    sock.setTimeout(timeoutMs, () => done(new Error(`timed out after ${timeoutMs} ms`)));
    sock.on('error', (e) => done(e));
    // TLS 1.3 servers reject a client certificate after the client's handshake ends: wait for that alert.
    sock.on(tlsOpts ? 'secureConnect' : 'connect', () => setTimeout(() => done(undefined), tlsOpts ? 500 : 0));
    sock.on('close', () => done(tlsOpts ? new Error('connection closed right after the TLS handshake (client certificate rejected?)') : undefined));
  });
}

/** explainConnectError, with the endpoint probed first when the SDK's error does not say why. */
export async function explainConnectFailure(err: unknown, s: TemporalSettings): Promise<string> {
  if (classifyConnectError(err) === 'other' || /before the deadline/i.test((err as Error)?.message ?? '')) {
    const probe = await probeEndpoint(s);
    if (probe) {
      const named = new Error(`${probe.message}${(probe as NodeJS.ErrnoException).code ? ` (${(probe as NodeJS.ErrnoException).code})` : ''}`);
      if (classifyConnectError(named) !== 'other') return explainConnectError(named, s);
    }
  }
  return explainConnectError(err, s);
}
