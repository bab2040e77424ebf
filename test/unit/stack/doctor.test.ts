import * as net from 'node:net';
import { fetchErrorText } from '../../../src/stack/doctor';

/** What doctor says when fetch fails: undici's "fetch failed" with its cause, from real sockets. */
describe('fetchErrorText', () => {
  test('a refused connection names ECONNREFUSED', async () => {
    // A port that was just free: nothing listens there.
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise((r) => probe.close(r));
    const err = await fetch(`http://127.0.0.1:${port}/health`).catch((e: unknown) => e);
    expect(fetchErrorText(err)).toMatch(new RegExp(`^fetch failed \\(ECONNREFUSED .*127\\.0\\.0\\.1:${port}\\)$`));
  });

  test('a server that closes the socket without answering is named as such', async () => {
    const server = net.createServer((socket) => socket.once('data', () => socket.destroy()));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const err = await fetch(`http://127.0.0.1:${(server.address() as net.AddressInfo).port}/health`).catch((e: unknown) => e);
      expect(fetchErrorText(err)).toMatch(/^fetch failed \(.*(closed|ECONNRESET|socket)/i);
    } finally {
      server.close();
    }
  });

  test('an error without a cause keeps its message', () => {
    expect(fetchErrorText(new Error('The operation was aborted due to timeout'))).toBe('The operation was aborted due to timeout');
  });
});
