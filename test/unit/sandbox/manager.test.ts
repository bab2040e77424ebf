/**
 * SandboxManager's leftovers (src/sandbox/manager.ts): a sandbox whose removal failed because dockerd was away
 * (its socket gone mid-restart) is removed once dockerd is back, by the janitor's next sweep. Before, it stayed
 * until its worker exited: the janitor keeps a live worker's own containers (a 46-step soak found two of them).
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type Docker from 'dockerode';
import pino from 'pino';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { RunConfig } from '../../../src/config/schema';
import { SandboxManager, sweep } from '../../../src/sandbox';
import { LeaseStore } from '../../../src/sandbox/lease';

const log = pino({ level: 'silent' });
const limits = { ...RunConfig.parse({ env: [{ id: 'swe-grep' }] }).sandbox, warm_pool_size: 0 };

/** A dockerd that can go away: while `down`, every call fails as node does on a missing socket. */
function fakeDocker() {
  const state = { down: false, containers: new Set<string>() };
  const away = () => Object.assign(new Error('connect ENOENT /var/run/docker.sock'), { code: 'ENOENT' });
  let n = 0;
  const docker = {
    createContainer: async () => {
      const id = `c${n++}`;
      state.containers.add(id);
      return {
        id,
        start: async () => undefined,
        inspect: async () => { if (state.down) throw away(); return { State: {} }; },
        stop: async () => { if (state.down) throw away(); },
        stats: async () => { if (state.down) throw away(); return {}; },
        remove: async () => {
          if (state.down) throw away();
          if (!state.containers.delete(id)) throw Object.assign(new Error('no such container'), { statusCode: 404 });
        },
      };
    },
    listContainers: async () => [],
  } as unknown as Docker;
  return { docker, state };
}

test('a sandbox whose removal failed while dockerd was away is removed when it is back, by the next sweep', async () => {
  const { docker, state } = fakeDocker();
  const manager = new SandboxManager({ docker, log, workerId: 'me:1:aaaaaa', image: 'ratchet-sandbox:test' });
  const kept = await manager.acquire({ labels: { run: 'r', step: 0, rollout: 'a' }, limits });
  const gone = await manager.acquire({ labels: { run: 'r', step: 0, rollout: 'b' }, limits });
  await gone.release();
  state.down = true;
  await kept.release(); // logged, not thrown: release runs in finally blocks
  expect([...state.containers]).toEqual([kept.id]);
  expect(await manager.removeLeftovers()).toBe(1); // still away: kept for the next try
  state.down = false;
  const leases = new LeaseStore(new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-leases-'))));
  await sweep(docker, { leases, selfId: manager.workerId, log, removeOwnLeftovers: () => manager.removeLeftovers() });
  expect(state.containers.size).toBe(0);
  expect(await manager.removeLeftovers()).toBe(0);
});
