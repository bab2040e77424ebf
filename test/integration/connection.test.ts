/**
 * Connections through a real TLS endpoint: a private Temporal dev server (the
 * CLI from infra/temporal.sh) behind a TLS terminator that requires client
 * certificates (Node's tls, i.e. OpenSSL), with CAs and certificates made by
 * openssl for this test. Checks the profile path end to end (CLI client, TS
 * worker, Python trainer's connection), the payload codec in the stored
 * history, and the errors for a wrong CA, a missing client certificate and an
 * unreachable address.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import * as tls from 'node:tls';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { connectClient } from '../../src/cli/temporal';
import { CHECKS } from '../../src/stack/doctor';
import { componentLogger } from '../../src/shared/logger';
import { connectWorker } from '../../src/workers/connect';
import * as activities from '../fixtures/workflows/roundTripActivities';
import { makeTestPki, type TestPki } from '../helpers/certs';
import { describeWithStack, REPO, STATE, TEMPORAL_BIN } from '../helpers/stack';

const TRAINER_PY = path.join(STATE, 'venvs', 'trainer', 'bin', 'python');
const KEY = Buffer.alloc(32, 42).toString('base64');

/** A TLS terminator in front of a plaintext gRPC port: what a load balancer or ingress does for a self-hosted cluster. */
async function startTlsProxy(pki: TestPki, upstreamPort: number): Promise<{ port: number; close: () => Promise<void> }> {
  const server = tls.createServer({
    cert: readFileSync(pki.serverCert), key: readFileSync(pki.serverKey), ca: readFileSync(pki.ca),
    requestCert: true, rejectUnauthorized: true, ALPNProtocols: ['h2'],
  }, (socket) => {
    const upstream = net.connect(upstreamPort, '127.0.0.1');
    socket.pipe(upstream).pipe(socket);
    const end = () => { socket.destroy(); upstream.destroy(); };
    socket.on('error', end);
    upstream.on('error', end);
  });
  server.on('tlsClientError', () => { /* a rejected client: the test expects it */ });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as net.AddressInfo).port, close: () => new Promise((r) => server.close(() => r())) };
}

describeWithStack('Temporal connections over TLS, profiles and the payload codec', ['temporalBinary'], () => {
  let env: TestWorkflowEnvironment;
  let pki: TestPki;
  let proxy: { port: number; close: () => Promise<void> };
  let dir: string;
  const saved = { ...process.env };

  const profileFile = (ca: string, client?: { cert: string; key: string }) => {
    const file = path.join(mkdtempSync(path.join(dir, 'p-')), 'temporal.toml');
    writeFileSync(file, `[profile.selfhosted]\naddress = "localhost:${proxy.port}"\nnamespace = "default"\n` +
      `[profile.selfhosted.tls]\nserver_ca_cert_path = "${ca}"\n` +
      (client ? `client_cert_path = "${client.cert}"\nclient_key_path = "${client.key}"\n` : ''));
    return file;
  };
  /** Points this process's TEMPORAL_* at a profile, as a user's shell would. */
  const useProfile = (file: string, extra: Record<string, string> = {}) => {
    for (const k of Object.keys(process.env)) if (k.startsWith('TEMPORAL_') || k.startsWith('RATCHET_CODEC')) delete process.env[k];
    Object.assign(process.env, { TEMPORAL_CONFIG_FILE: file, TEMPORAL_PROFILE: 'selfhosted', ...extra });
  };

  beforeAll(async () => {
    env = await TestWorkflowEnvironment.createLocal({
      server: { executable: { type: 'existing-path', path: TEMPORAL_BIN }, ip: '127.0.0.1' },
    });
    pki = makeTestPki();
    dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-conn-'));
    proxy = await startTlsProxy(pki, Number(env.address.split(':').pop()));
  }, 120_000);

  afterEach(() => {
    for (const k of Object.keys(process.env)) if (!(k in saved)) delete process.env[k];
    Object.assign(process.env, saved);
  });

  afterAll(async () => {
    await proxy?.close();
    await env?.teardown();
  });

  test('mTLS profile + codec: a workflow round-trips through the TLS endpoint, and its stored history holds only ciphertext', async () => {
    useProfile(profileFile(pki.ca, { cert: pki.clientCert, key: pki.clientKey }), { RATCHET_CODEC_KEY: KEY });
    const { connection, namespace, dataConverter } = await connectWorker(componentLogger('test'), 1);
    const { client, close } = await connectClient();
    const taskQueue = `conn-${process.pid}`;
    const workflowId = `conn-codec-${Date.now()}`;
    const secret = 'secret-greeting-7f3a';
    try {
      const worker = await Worker.create({
        connection, namespace, dataConverter, taskQueue,
        workflowsPath: path.join(__dirname, '..', 'fixtures', 'workflows', 'roundTrip.ts'),
        activities,
      });
      const result = await worker.runUntil(client.workflow.execute('roundTrip', { taskQueue, workflowId, args: [secret] }));
      expect(result).toMatchObject({ greeting: secret, workflowId });

      // The raw history, read straight from the server with no codec: every payload is ciphertext.
      const raw = await env.client.workflow.getHandle(workflowId).fetchHistory();
      const payloads: { metadata?: Record<string, Uint8Array> | null; data?: Uint8Array | null }[] = [];
      const collect = (o: unknown): void => {
        if (!o || typeof o !== 'object') return;
        if ('payloads' in o && Array.isArray((o as { payloads: unknown }).payloads)) payloads.push(...(o as { payloads: typeof payloads }).payloads);
        for (const v of Object.values(o)) collect(v);
      };
      collect(raw.events);
      expect(payloads.length).toBeGreaterThanOrEqual(3); // workflow input, activity result, workflow result
      for (const p of payloads) {
        expect(Buffer.from(p.metadata!.encoding!).toString()).toBe('binary/encrypted');
        expect(Buffer.from(p.data!).toString('latin1')).not.toContain(secret);
      }
      expect(JSON.stringify(raw)).not.toContain(secret);
      expect(Buffer.concat(payloads.map((p) => Buffer.from(p.data!))).toString('latin1')).not.toContain(os.hostname());
    } finally {
      await close();
      await connection.close();
    }
  }, 180_000);

  test('a wrong CA fails at once in the worker and the CLI, naming the CA setting and the fix', async () => {
    const file = profileFile(pki.otherCa, { cert: pki.clientCert, key: pki.clientKey });
    useProfile(file);
    const t0 = Date.now();
    const err = await connectWorker(componentLogger('test'), 60).then(() => undefined, (e: Error) => e);
    expect(Date.now() - t0).toBeLessThan(20_000); // no 60 retries: waiting cannot fix a CA
    expect(err?.message).toMatch(/^TLS: Temporal at localhost:\d+ .* presented a certificate that the CA in tls\.server_ca_cert_path in profile "selfhosted" of .*=.*other-ca\.pem does not trust/);
    expect(err?.message).toMatch(/Fix: set tls\.server_ca_cert_path in profile "selfhosted" .* to the CA that signed the server's certificate/);
    await expect(connectClient()).rejects.toThrow(/^TLS: Temporal at localhost:\d+ .*other-ca\.pem does not trust.*Fix: /);
  }, 60_000);

  test('no client certificate on an mTLS endpoint: an error about the client certificate', async () => {
    useProfile(profileFile(pki.ca));
    await expect(connectClient()).rejects.toThrow(/Temporal at localhost:\d+ .*(client certificate|closed the connection).*Fix: /);
    const err = await connectWorker(componentLogger('test'), 1).then(() => undefined, (e: Error) => e);
    expect(err?.message).toMatch(/Temporal at localhost:\d+ .*(client certificate|closed the connection).*Fix: /);
  }, 60_000);

  test('an unreachable address names where it came from', async () => {
    for (const k of Object.keys(process.env)) if (k.startsWith('TEMPORAL_')) delete process.env[k];
    process.env.TEMPORAL_ADDRESS = '127.0.0.1:1';
    await expect(connectClient()).rejects.toThrow(/^cannot reach Temporal at 127\.0\.0\.1:1 \(address from TEMPORAL_ADDRESS\).*Fix: start it/);
  }, 30_000);

  test('doctor shows the connection in use, TLS and profile, never a secret', async () => {
    useProfile(profileFile(pki.ca, { cert: pki.clientCert, key: pki.clientKey }), { RATCHET_CODEC_KEY: KEY, TEMPORAL_API_KEY: 'do-not-print-me' });
    const check = CHECKS.find(([name]) => name === 'temporal')![1];
    const r = await check({ temporalAddress: '', namespace: '', profile: '', inferenceUrl: '', servedModel: '' });
    expect(r.detail).toContain(`localhost:${proxy.port} (address in profile "selfhosted"`);
    expect(r.detail).toMatch(/TLS on .*server CA .*ca\.pem, client cert .*client\.pem \(mTLS\)/);
    expect(r.detail).toMatch(/payload codec AES-256-GCM, key id k[0-9a-f]{12}/);
    expect(r.detail).toContain('API key set (TEMPORAL_API_KEY)');
    expect(JSON.stringify(r)).not.toContain('do-not-print-me');
    expect(JSON.stringify(r)).not.toContain(KEY);
  }, 30_000);

  const havePython = existsSync(TRAINER_PY);
  if (!havePython) console.warn(`SKIPPING the trainer's TLS connection test: no trainer venv at ${TRAINER_PY}. Fix: bash infra/trainer-env.sh`);
  (havePython ? test : test.skip)('the trainer connects through the same profile, and explains a wrong CA', async () => {
    // Exits the way the worker does on a fatal connection error (connection.exit_on_connect_error).
    const script = 'import asyncio\nfrom ratchet_trainer import connection\n' +
      'async def main():\n    r = connection.resolve()\n    c = await connection.connect_client(r)\n' +
      '    print("ok", r.address, (await c.count_workflows()).count >= 0)\n' +
      'try:\n    asyncio.run(main())\nexcept ConnectionError as e:\n    connection.exit_on_connect_error(e, 3)\n';
    // Async: the TLS terminator lives in this process and must keep serving while Python runs.
    const run = (file: string) => new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
      const p = spawn(TRAINER_PY, ['-c', script], {
        env: { ...process.env, TEMPORAL_CONFIG_FILE: file, TEMPORAL_PROFILE: 'selfhosted', PYTHONPATH: path.join(REPO, 'trainer') },
        timeout: 60_000,
      });
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (d) => { stdout += d; });
      p.stderr.on('data', (d) => { stderr += d; });
      p.on('close', (status) => resolve({ status, stdout, stderr }));
    });
    const good = await run(profileFile(pki.ca, { cert: pki.clientCert, key: pki.clientKey }));
    expect(`${good.stdout}${good.stderr}`).toContain(`ok localhost:${proxy.port} True`);
    const bad = await run(profileFile(pki.otherCa, { cert: pki.clientCert, key: pki.clientKey }));
    expect(bad.status).toBe(3);
    expect(bad.stdout).toMatch(/error: TLS: Temporal at localhost:\d+ .*other-ca\.pem does not trust .*Fix: set tls\.server_ca_cert_path/);
  }, 120_000);
});
