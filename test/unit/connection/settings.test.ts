import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  ConnectionConfigError, classifyConnectError, configFilePath, describeSettings, describeSettingsLine,
  explainConnectError, resolveConnection, resolveTemporalSettings, sdkConnectionOptions,
} from '../../../src/connection';
import { makeTestPki, type TestPki } from '../../helpers/certs';

let pki: TestPki;
let dir: string;
beforeAll(() => {
  pki = makeTestPki();
  dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-envconfig-'));
});

/** A temporal.toml in a fresh dir; returns the env that points at it (and nothing else of the real env). */
function withToml(toml: string, extra: Record<string, string> = {}): Record<string, string> {
  const file = path.join(mkdtempSync(path.join(dir, 'c-')), 'temporal.toml');
  writeFileSync(file, toml);
  return { TEMPORAL_CONFIG_FILE: file, ...extra };
}

const NO_FILE = { HOME: '/nonexistent-home' };

describe('resolveTemporalSettings', () => {
  test('nothing configured: the local dev server, default namespace, no TLS', () => {
    const s = resolveTemporalSettings({}, NO_FILE);
    expect(s).toMatchObject({ address: '127.0.0.1:7233', namespace: 'default', tls: { enabled: false }, profile: undefined, configFile: undefined });
    expect(s.sources).toMatchObject({ address: 'default', namespace: 'default', tls: 'default' });
    expect(sdkConnectionOptions(s)).toEqual({ address: '127.0.0.1:7233' });
  });

  test('the default file location is $XDG_CONFIG_HOME/temporalio/temporal.toml, then ~/.config', () => {
    expect(configFilePath({ XDG_CONFIG_HOME: '/x', HOME: '/h' })).toBe('/x/temporalio/temporal.toml');
    expect(configFilePath({ HOME: '/h' })).toBe('/h/.config/temporalio/temporal.toml');
    expect(configFilePath({ TEMPORAL_CONFIG_FILE: '/f.toml', HOME: '/h' })).toBe('/f.toml');
  });

  test('TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE alone', () => {
    const s = resolveTemporalSettings({}, { ...NO_FILE, TEMPORAL_ADDRESS: '10.0.0.1:7233', TEMPORAL_NAMESPACE: 'rl' });
    expect(s).toMatchObject({ address: '10.0.0.1:7233', namespace: 'rl' });
    expect(s.sources).toMatchObject({ address: 'TEMPORAL_ADDRESS', namespace: 'TEMPORAL_NAMESPACE' });
  });

  test('the default profile of the file applies without TEMPORAL_PROFILE', () => {
    const env = withToml('[profile.default]\naddress = "cluster.internal:7233"\nnamespace = "ratchet"\n');
    const s = resolveTemporalSettings({}, env);
    expect(s).toMatchObject({ address: 'cluster.internal:7233', namespace: 'ratchet', profile: 'default', configFile: env.TEMPORAL_CONFIG_FILE });
    expect(s.sources.address).toBe(`address in profile "default" of ${env.TEMPORAL_CONFIG_FILE}`);
  });

  test('TEMPORAL_PROFILE picks a profile; the environment overrides the file; flags override both', () => {
    const toml = '[profile.default]\naddress = "a:1"\n[profile.prod]\naddress = "prod:7233"\nnamespace = "prod-ns"\n';
    const env = withToml(toml, { TEMPORAL_PROFILE: 'prod' });
    expect(resolveTemporalSettings({}, env)).toMatchObject({ address: 'prod:7233', namespace: 'prod-ns', profile: 'prod' });
    const envOver = { ...env, TEMPORAL_NAMESPACE: 'from-env' };
    const s = resolveTemporalSettings({}, envOver);
    expect(s).toMatchObject({ address: 'prod:7233', namespace: 'from-env' });
    expect(s.sources.namespace).toBe('TEMPORAL_NAMESPACE');
    const f = resolveTemporalSettings({ address: 'flag:7233', profile: 'default' }, envOver);
    expect(f).toMatchObject({ address: 'flag:7233', namespace: 'from-env', profile: 'default' });
    expect(f.sources.address).toBe('--address');
  });

  test('a TLS profile with server CA and mTLS pair becomes the SDK TLS config', () => {
    const env = withToml(`[profile.default]\naddress = "localhost:7234"\n[profile.default.tls]\n` +
      `server_ca_cert_path = "${pki.ca}"\nclient_cert_path = "${pki.clientCert}"\nclient_key_path = "${pki.clientKey}"\nserver_name = "localhost"\n`);
    const s = resolveTemporalSettings({}, env);
    expect(s.tls.enabled).toBe(true);
    expect(s.tls.serverCaCert?.path).toBe(pki.ca);
    expect(s.tls.serverCaCert?.source).toBe(`tls.server_ca_cert_path in profile "default" of ${env.TEMPORAL_CONFIG_FILE}`);
    const o = sdkConnectionOptions(s);
    expect(o.tls).toMatchObject({ serverNameOverride: 'localhost' });
    expect(typeof o.tls === 'object' && o.tls.serverRootCACertificate?.toString()).toContain('BEGIN CERTIFICATE');
    expect(typeof o.tls === 'object' && o.tls.clientCertPair?.key.toString()).toContain('PRIVATE KEY');
  });

  test('TEMPORAL_TLS_* variables alone turn TLS on, and override the file\'s paths', () => {
    const s = resolveTemporalSettings({}, { ...NO_FILE, TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.ca });
    expect(s.tls).toMatchObject({ enabled: true, serverCaCert: { path: pki.ca, source: 'TEMPORAL_TLS_SERVER_CA_CERT_PATH' } });
    const env = withToml(`[profile.default.tls]\nserver_ca_cert_path = "${pki.otherCa}"\n`, { TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.ca });
    expect(resolveTemporalSettings({}, env).tls.serverCaCert?.path).toBe(pki.ca);
  });

  test('TEMPORAL_TLS=false turns a file profile\'s TLS off; certificates then are an error', () => {
    const plain = resolveTemporalSettings({}, withToml('[profile.default.tls]\nserver_name = "x"\n', { TEMPORAL_TLS: 'false' }));
    expect(plain.tls.enabled).toBe(false);
    expect(() => resolveTemporalSettings({}, withToml(`[profile.default.tls]\nserver_ca_cert_path = "${pki.ca}"\n`, { TEMPORAL_TLS: 'false' })))
      .toThrow(/TLS is disabled \(TEMPORAL_TLS\) but TLS certificates are set/);
  });

  test('an API key turns TLS on with the system CAs (Temporal Cloud), and is never shown', () => {
    const env = withToml('[profile.cloud]\naddress = "ns.acct.tmprl.cloud:7233"\nnamespace = "ns.acct"\napi_key = "secret-key-123"\n', { TEMPORAL_PROFILE: 'cloud' });
    const s = resolveTemporalSettings({}, env);
    expect(s.tls.enabled).toBe(true);
    expect(sdkConnectionOptions(s)).toMatchObject({ address: 'ns.acct.tmprl.cloud:7233', tls: true, apiKey: 'secret-key-123' });
    const shown = JSON.stringify(describeSettings(s)) + describeSettingsLine(s);
    expect(shown).not.toContain('secret-key-123');
    expect(shown).toContain('system CAs');
    expect(describeSettings(s).apiKey).toBe(`set (api_key in profile "cloud" of ${env.TEMPORAL_CONFIG_FILE})`);
  });
});

describe('bad settings fail before any connection, naming the setting and the fix', () => {
  const bad = (flags: object, env: Record<string, string>) => {
    try {
      resolveTemporalSettings(flags, env);
    } catch (err) {
      expect(err).toBeInstanceOf(ConnectionConfigError);
      expect((err as Error).message).toMatch(/Fix: /);
      return (err as Error).message;
    }
    throw new Error('expected a ConnectionConfigError');
  };

  test('a profile that is not in the file lists the ones that are', () => {
    const env = withToml('[profile.default]\n[profile.prod]\naddress = "p:1"\n', { TEMPORAL_PROFILE: 'staging' });
    expect(bad({}, env)).toMatch(/profile "staging" is not in .*temporal\.toml \(it has: default, prod\)/);
  });

  test('a profile asked for with no config file at all', () => {
    expect(bad({ profile: 'prod' }, NO_FILE)).toMatch(/profile "prod" was asked for .* but there is no config file/);
  });

  test('TEMPORAL_CONFIG_FILE pointing nowhere', () => {
    expect(bad({}, { TEMPORAL_CONFIG_FILE: path.join(dir, 'missing.toml') })).toMatch(/TEMPORAL_CONFIG_FILE=.*missing\.toml does not exist/);
  });

  test('a file that is not TOML, or has a misspelt key, names the file', () => {
    expect(bad({}, withToml('[profile.default\naddress = 1'))).toMatch(/temporal\.toml is not a valid temporal\.toml/);
    expect(bad({}, withToml('[profile.default.tls]\nserver_ca_path = "/x"\n'))).toMatch(/unrecognized in profile\.default\.tls: server_ca_path/);
  });

  test('an address with a scheme or without a port', () => {
    expect(bad({}, { ...NO_FILE, TEMPORAL_ADDRESS: 'http://host:7233' })).toMatch(/^TEMPORAL_ADDRESS="http:\/\/host:7233" is not a Temporal address/);
    expect(bad({ address: 'host' }, NO_FILE)).toMatch(/^--address="host" is not a Temporal address/);
  });

  test('a CA path that does not exist, or is not a certificate', () => {
    expect(bad({}, { ...NO_FILE, TEMPORAL_TLS_SERVER_CA_CERT_PATH: '/no/such/ca.pem' }))
      .toMatch(/^TEMPORAL_TLS_SERVER_CA_CERT_PATH=\/no\/such\/ca\.pem cannot be read \(ENOENT\)/);
    const env = withToml(`[profile.default.tls]\nserver_ca_cert_path = "${pki.clientKey}"\n`);
    expect(bad({}, env)).toMatch(/^tls\.server_ca_cert_path in profile "default" of .*=.*client\.key is not a PEM certificate/);
  });

  test('a client certificate without its key', () => {
    expect(bad({}, { ...NO_FILE, TEMPORAL_TLS_CLIENT_CERT_PATH: pki.clientCert }))
      .toMatch(/mTLS needs both halves: TEMPORAL_TLS_CLIENT_CERT_PATH is set but the client key .* is not/);
  });
});

describe('codec key from the environment', () => {
  test('unset: no codec, an empty data converter', () => {
    expect(resolveConnection({}, NO_FILE)).toMatchObject({ codec: undefined, dataConverter: {} });
  });

  test('a key of the wrong length names the variable, its length and how to make one', () => {
    const short = Buffer.alloc(16, 1).toString('base64');
    expect(() => resolveConnection({}, { ...NO_FILE, RATCHET_CODEC_KEY: short }))
      .toThrow('RATCHET_CODEC_KEY decodes to 16 bytes; AES-256-GCM needs exactly 32. Fix: generate a key with `openssl rand -base64 32`');
    expect(() => resolveConnection({}, { ...NO_FILE, RATCHET_CODEC_KEY: 'not base64!' })).toThrow(/RATCHET_CODEC_KEY is not base64/);
  });

  test('a good key gives a codec in the data converter, with a derived key id', () => {
    const r = resolveConnection({}, { ...NO_FILE, RATCHET_CODEC_KEY: Buffer.alloc(32, 7).toString('base64') });
    expect(r.codec?.keyId).toMatch(/^k[0-9a-f]{12}$/);
    expect(r.dataConverter.payloadCodecs).toEqual([r.codec]);
  });
});

describe('connect errors are explained', () => {
  const settings = () => resolveTemporalSettings({}, { ...NO_FILE, TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.ca });
  test.each([
    ['14 UNAVAILABLE: No connection established. Last error: connect ECONNREFUSED 127.0.0.1:1', 'unreachable', /cannot reach Temporal at 127\.0\.0\.1:7233/],
    ['Failed to connect: tonic::transport::Error(Transport, ConnectError(ConnectError("tcp connect error", Os { code: 111, kind: ConnectionRefused })))', 'unreachable', /Fix: start it/],
    ['invalid peer certificate: UnknownIssuer', 'tls-untrusted', /TLS: .* the CA in TEMPORAL_TLS_SERVER_CA_CERT_PATH=.*ca\.pem does not trust/],
    ['14 UNAVAILABLE: No connection established. Last error: self-signed certificate in certificate chain', 'tls-untrusted', /Fix: set TEMPORAL_TLS_SERVER_CA_CERT_PATH to the CA that signed/],
    ['Hostname/IP does not match certificate\'s altnames', 'tls-hostname', /TEMPORAL_TLS_SERVER_NAME/],
    ['received fatal alert: CertificateRequired', 'tls-client-cert', /rejected the client certificate \(none was sent\)/],
    ['error:0A00010B:SSL routines::wrong version number', 'tls-to-plaintext', /does not speak TLS/],
  ])('%s', (message, kind, explained) => {
    expect(classifyConnectError(new Error(message))).toBe(kind);
    expect(explainConnectError(new Error(message), settings())).toMatch(explained);
  });
});
