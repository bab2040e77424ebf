/**
 * Issue 39, item 12: an inference server that accepts connections and never answers (a hung host,
 * a black-holed port) is noticed by the client's health probe, not after its 300 s request timeout
 * times three tries. A real TCP listener that accepts and says nothing stands in for it; the fake
 * vLLM (a live server, slow to answer) shows that a long generation is not cut short.
 */
import * as net from 'node:net';
import type { AddressInfo } from 'node:net';
import { InferenceUnavailableError, OpenAIModelClient, type CompletionRequest } from '../../../src/agent/model';
import { isReplicaDown } from '../../../src/agent/replicaPool';
import { startFakeVllm } from '../../helpers/fakeVllm';

jest.setTimeout(30_000);

const watch = { everyMs: 300, timeoutMs: 300, failures: 2 };
const request: CompletionRequest = {
  model: 'm', messages: [{ role: 'user', content: 'hi' }], tools: [],
  sampling: { temperature: 1, top_p: 1, max_tokens: 8 },
};

/** Accepts every connection and never writes a byte. */
async function blackHole(): Promise<{ url: string; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => { sockets.add(s); s.on('error', () => undefined); });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    close: () => new Promise((r) => { for (const s of sockets) s.destroy(); server.close(() => r()); }),
  };
}

describe('a silent inference server', () => {
  test('a request to a server that accepts and never answers fails with InferenceUnavailableError within the probe window', async () => {
    const hole = await blackHole();
    try {
      const client = new OpenAIModelClient(hole.url, { watch });
      const t0 = Date.now();
      const err = await client.complete(request).catch((e: unknown) => e);
      const ms = Date.now() - t0;
      expect(err).toBeInstanceOf(InferenceUnavailableError);
      expect((err as Error).message).toMatch(/did not answer 2 health probes/);
      // everyMs x failures + timeoutMs, with slack; without the probe it waits out the 300 s timeout.
      expect(ms).toBeLessThan(3_000);
      // A replica pool moves such a rollout to another replica.
      expect(isReplicaDown(err)).toBe(true);
    } finally {
      await hole.close();
    }
  });

  test('a live server slower than the probe window still answers: its /health keeps the request alive', async () => {
    const vllm = await startFakeVllm(() => ({ content: 'done', delayMs: 2_000 }));
    try {
      const client = new OpenAIModelClient(vllm.url, { watch });
      const c = await client.complete(request);
      expect(c.content).toBe('done');
    } finally {
      await vllm.close();
    }
  });

  test("the caller's own abort stays an abort, not InferenceUnavailable", async () => {
    const hole = await blackHole();
    try {
      const client = new OpenAIModelClient(hole.url, { watch: { ...watch, everyMs: 5_000 } });
      const ctl = new AbortController();
      setTimeout(() => ctl.abort(), 200);
      const err = await client.complete({ ...request, signal: ctl.signal }).catch((e: unknown) => e);
      expect(err).not.toBeInstanceOf(InferenceUnavailableError);
    } finally {
      await hole.close();
    }
  });
});
