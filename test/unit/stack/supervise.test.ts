import { createServer, type Server } from 'node:http';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { dockerPingProbe, temporalHealthProbe } from '../../../src/stack/supervise';

const listen = (server: Server, socket: string) => new Promise<void>((r) => server.listen(socket, r));

describe('the supervisor\'s in-process service probes', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'probe-'));

  it('dockerd: a 200 from /_ping on the socket is healthy; an error status, a hang or no socket is not', async () => {
    const ok = path.join(dir, 'ok.sock');
    const bad = path.join(dir, 'bad.sock');
    const hung = path.join(dir, 'hung.sock');
    const servers = [
      createServer((req, res) => { res.statusCode = req.url === '/_ping' ? 200 : 404; res.end('OK'); }),
      createServer((_req, res) => { res.statusCode = 500; res.end(); }),
      createServer(() => { /* never answers */ }),
    ];
    await listen(servers[0]!, ok); await listen(servers[1]!, bad); await listen(servers[2]!, hung);
    try {
      expect(await dockerPingProbe(ok)()).toBe(true);
      expect(await dockerPingProbe(bad)()).toBe(false);
      expect(await dockerPingProbe(hung, 200)()).toBe(false);
      expect(await dockerPingProbe(path.join(dir, 'none.sock'))()).toBe(false);
    } finally {
      for (const s of servers) { s.closeAllConnections(); s.close(); }
    }
  });

  it('Temporal: a port where no server listens is unhealthy, within the timeout', async () => {
    const probe = temporalHealthProbe('127.0.0.1:1', 1_000);
    const t0 = Date.now();
    expect(await probe()).toBe(false);
    expect(await probe()).toBe(false); // reconnects after a failure, still false
    expect(Date.now() - t0).toBeLessThan(10_000);
  });
});
