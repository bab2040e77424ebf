/**
 * The stack supervisor (src/stack/supervisor.ts) on real processes: a worker that
 * dies is started again; one frozen by SIGSTOP stops touching its liveness file
 * and is kill -9ed and started again; one stopped on purpose is left alone.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, utimesSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { isAlive } from '../../../src/shared/pidFiles';
import { staleAfterMs } from '../../../src/stack/supervise';
import { readRestarting, restartingNote, Supervisor, type Supervised } from '../../../src/stack/supervisor';
import { logger } from '../../../src/shared/logger';

const quiet = logger.child({ component: 'test' });
quiet.level = 'silent';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A stand-in worker: touches its liveness file every 100 ms, like src/workers/livenessFile.ts. */
function worker(file: string): ChildProcess {
  const child = spawn(process.execPath, ['-e', `const fs=require('fs');setInterval(()=>{fs.closeSync(fs.openSync(${JSON.stringify(file)},'a'));const t=new Date();fs.utimesSync(${JSON.stringify(file)},t,t)},100)`], { detached: true, stdio: 'ignore' });
  return child;
}

describe('Supervisor', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-sup-'));
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const c of children) try { process.kill(-c.pid!, 'SIGKILL'); } catch { /* gone */ }
  });

  function entry(name: string, over: Partial<Supervised> = {}) {
    const file = path.join(dir, `${name}.alive`);
    const state: { child?: ChildProcess; startedAt?: number; restarts: number; stopped: boolean } = { restarts: 0, stopped: false };
    const start = () => {
      state.child = worker(file);
      state.startedAt = Date.now();
      children.push(state.child);
    };
    const e: Supervised = {
      name,
      pid: () => (state.stopped ? undefined : state.child?.pid),
      startedAt: () => state.startedAt,
      livenessFile: file,
      staleAfterMs: 700,
      startGraceMs: 300,
      restart: async () => { state.restarts++; start(); },
      ...over,
    };
    start();
    return { e, state, file };
  }

  async function untilFile(file: string) {
    for (let i = 0; i < 100 && !existsSync(file); i++) await sleep(50);
  }

  test('a live worker is left alone; a frozen one (SIGSTOP) is killed -9 and started again', async () => {
    const { e, state, file } = entry('frozen');
    await untilFile(file);
    const sup = new Supervisor([e], { log: quiet });
    await sleep(300);
    expect(await sup.checkOnce()).toEqual([]);
    const frozen = state.child!;
    process.kill(frozen.pid!, 'SIGSTOP');
    await sleep(1_200);
    const actions = await sup.checkOnce();
    expect(actions).toEqual([expect.objectContaining({ name: 'frozen', action: 'restarted', reason: 'stale' })]);
    expect(isAlive(frozen.pid)).toBe(false);
    expect(state.restarts).toBe(1);
    expect(state.child!.pid).not.toBe(frozen.pid);
    await sleep(400);
    expect(await sup.checkOnce()).toEqual([]); // the new one is live
  });

  test('a worker that died is started again; one stopped on purpose is not', async () => {
    const died = entry('died');
    const stopped = entry('stopped');
    await untilFile(died.file);
    const sup = new Supervisor([died.e, stopped.e], { log: quiet });
    process.kill(died.state.child!.pid!, 'SIGKILL');
    stopped.state.stopped = true;
    process.kill(stopped.state.child!.pid!, 'SIGKILL');
    await sleep(200);
    expect(await sup.checkOnce()).toEqual([expect.objectContaining({ name: 'died', action: 'restarted', reason: 'died' })]);
    expect(stopped.state.restarts).toBe(0);
  });

  test("a liveness file older than the process is its predecessor's: the start grace counts, then staleness", async () => {
    const file = path.join(dir, 'silent.alive');
    writeFileSync(file, '');
    const old = new Date(Date.now() - 60_000);
    utimesSync(file, old, old);
    const child = spawn('sleep', ['30'], { detached: true, stdio: 'ignore' });
    children.push(child);
    let restarts = 0;
    const e: Supervised = {
      name: 'silent', pid: () => child.pid, startedAt: () => Date.now() - 100, livenessFile: file,
      staleAfterMs: 700, startGraceMs: 300, restart: async () => { restarts++; },
    };
    const sup = new Supervisor([e], { log: quiet });
    expect(await sup.checkOnce()).toEqual([]); // young: still in its start grace
    const e2 = { ...e, startedAt: () => Date.now() - 2_000 };
    expect(await new Supervisor([e2], { log: quiet }).checkOnce()).toEqual([expect.objectContaining({ reason: 'stale' })]);
    expect(restarts).toBe(1);
  });

  test('a service with no liveness file of its own is live while its probe answers; one that stops answering (hung) is killed -9 and restarted, and the state file says so meanwhile', async () => {
    const file = path.join(dir, 'probed.alive');
    let child = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
    children.push(child);
    const hung = child;
    let healthy = true;
    let seenDuringRestart: unknown;
    const stateFile = path.join(dir, 'restarting.json');
    const e: Supervised = {
      name: 'probed', pid: () => child.pid, startedAt: () => Date.now() - 10_000, livenessFile: file,
      staleAfterMs: 700, startGraceMs: 300,
      probe: async () => healthy,
      restart: async () => {
        seenDuringRestart = readRestarting(stateFile);
        child = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
        children.push(child);
        healthy = true;
      },
    };
    const sup = new Supervisor([e], { log: quiet, stateFile });
    // The process never touches its file: only the probe's answers keep it live.
    for (let i = 0; i < 4; i++) {
      expect(await sup.checkOnce()).toEqual([]);
      await sleep(300);
    }
    healthy = false; // alive, but /health no longer answers
    const actions: unknown[] = [];
    for (let i = 0; i < 8 && actions.length === 0; i++) {
      await sleep(200);
      actions.push(...await sup.checkOnce());
    }
    expect(actions).toEqual([expect.objectContaining({ name: 'probed', action: 'restarted', reason: 'stale' })]);
    expect(isAlive(hung.pid)).toBe(false);
    expect(seenDuringRestart).toEqual({ probed: { reason: 'stale', since: expect.any(String) } });
    expect(readRestarting(stateFile)).toEqual({}); // back
  });

  test('a probe that throws (connection refused) counts as no answer', async () => {
    const child = spawn('sleep', ['60'], { detached: true, stdio: 'ignore' });
    children.push(child);
    let restarts = 0;
    const e: Supervised = {
      name: 'throws', pid: () => child.pid, startedAt: () => Date.now() - 10_000, livenessFile: path.join(dir, 'throws.alive'),
      staleAfterMs: 700, startGraceMs: 300, probe: async () => { throw new Error('connect ECONNREFUSED'); }, restart: async () => { restarts++; },
    };
    expect(await new Supervisor([e], { log: quiet }).checkOnce()).toEqual([expect.objectContaining({ name: 'throws', reason: 'stale' })]);
    expect(restarts).toBe(1);
  });
});

describe('restartingNote (ratchet status)', () => {
  test('names each service being restarted, why and since when; nothing when none', () => {
    const now = Date.parse('2026-01-01T00:01:00Z');
    expect(restartingNote({}, now)).toBe('');
    expect(restartingNote({ inference: { reason: 'died', since: '2026-01-01T00:00:20Z' }, temporal: { reason: 'stale', since: '2026-01-01T00:00:58Z', error: 'infra/temporal.sh start failed:\nport taken' } }, now))
      .toBe("the stack's supervisor is restarting inference (died 40 s ago), temporal (hung 2 s ago; last try failed: infra/temporal.sh start failed:)");
  });
});

describe('RATCHET_SUPERVISOR_STALE_S', () => {
  test('defaults to 60 s; out of bounds is refused naming the variable and the fix', () => {
    expect(staleAfterMs(undefined)).toBe(60_000);
    expect(staleAfterMs('120')).toBe(120_000);
    for (const bad of ['5', 'soon', '100000']) expect(() => staleAfterMs(bad)).toThrow(/RATCHET_SUPERVISOR_STALE_S=.*\[15, 3600\].*Fix:/);
  });
});
