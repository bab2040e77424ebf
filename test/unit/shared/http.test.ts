import * as net from 'node:net';
import { fetchErrorText, fetchJson } from '../../../src/shared/http';

/** What a failed fetch is reported as: undici's "fetch failed" with its cause, from real sockets. */
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

/** Requests on a socket the server closed as they went out (uvicorn's 5 s keep-alive): sent again. */
describe('fetchJson', () => {
  /** A server that drops the first `drops` requests' sockets unanswered and answers the rest with {"ok":true}. */
  async function flakyServer(drops: number) {
    let seen = 0;
    const server = net.createServer((socket) => socket.once('data', () => {
      if (++seen <= drops) return socket.destroy();
      socket.end('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\nconnection: close\r\n\r\n{"ok":true}');
    }));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return { url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/health`, server, seen: () => seen };
  }

  test('a request whose socket the server closed unanswered goes again, on a new socket', async () => {
    const s = await flakyServer(1);
    try {
      await expect(fetchJson(s.url)).resolves.toEqual({ status: 200, body: { ok: true } });
      expect(s.seen()).toBe(2);
    } finally {
      s.server.close();
    }
  });

  test('a server that keeps closing is reported after 3 tries, with the socket\'s reason', async () => {
    const s = await flakyServer(10);
    try {
      await expect(fetchJson(s.url)).rejects.toThrow(/^fetch failed \(.*(closed|ECONNRESET|socket)/i);
      expect(s.seen()).toBe(3);
    } finally {
      s.server.close();
    }
  });

  test('a refused connection is not retried', async () => {
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise((r) => probe.close(r));
    await expect(fetchJson(`http://127.0.0.1:${port}/health`)).rejects.toThrow(/ECONNREFUSED/);
  });
});
