/**
 * Inference replicas are a pool, on real parts: a real TrainRun (Temporal, the CPU vLLM with
 * SmolLM2, Docker sandboxes, the Python trainer) over two replicas, one of which is killed for
 * good in the middle of step 1. The step completes, the rollouts on the dead replica finish on
 * the live one (their turns name both), the weight sync after it reaches its quorum of 1 and
 * records the dead replica as behind, and every run invariant holds.
 *
 * Two real CPU vLLMs: only where the machine has the memory for a second one. One CPU vLLM with
 * SmolLM2 holds about 6 GiB here (API server ~0.9, engine core ~0.85, worker ~4.5 GiB RSS); the
 * shared 24 GiB test machine usually has 3 GiB or less available, so that variant skips, loudly,
 * and the test runs with the stack's one real vLLM (port 8000) plus a second replica on port 8001
 * that is a plain TCP forwarder to it: real vLLM answers while it lives, a dead port (connection
 * refused) once it is killed. What it cannot show: two replicas holding adapters apart (a restarted
 * replica that lost them); the unit tests (test/unit/agent/replicaPool.test.ts) cover that with fakes.
 */
import { mkdtempSync, promises as fs } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { describeWithStack, REPO } from '../helpers/stack';
import { uriToPath } from '../../src/artifacts/store';
import type { TrainRun } from '../../src/workflows/trainRun';
import type { RolloutSummary, Trajectory, TrainRunInput } from '../../src/contracts';
import { checkInvariants, distBuilt, killProc, startProc, takeOverStackWorkers, tinyConfig, workerCommands, type Proc } from '../helpers/trainrunStack';

const LIVE = 'http://127.0.0.1:8000/v1';
const DOOMED_PORT = 8001;
const DOOMED = `http://127.0.0.1:${DOOMED_PORT}/v1`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A TCP forwarder to the real vLLM: a replica while it lives, a refused port once closed. It counts
 * the completions it carried an answer for (a model turn sampled through it).
 */
async function forwarder(port: number, to: number): Promise<{ kill: () => Promise<void>; turns: () => number }> {
  const sockets = new Set<net.Socket>();
  let turns = 0;
  const server = net.createServer((client) => {
    const upstream = net.connect(to, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => { client.destroy(); upstream.destroy(); });
    }
    let asked = false;
    client.on('data', (b: Buffer) => { if (b.includes('POST /v1/completions')) asked = true; });
    upstream.on('data', (b: Buffer) => { if (asked && b.includes('HTTP/1.1 200')) { asked = false; turns++; } });
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, '127.0.0.1', resolve));
  return {
    turns: () => turns,
    kill: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const s of sockets) s.destroy();
    }),
  };
}

/** GiB the kernel says a new process could get. */
async function memAvailableGiB(): Promise<number> {
  const m = /MemAvailable:\s+(\d+) kB/.exec(await fs.readFile('/proc/meminfo', 'utf8'));
  return m ? Number(m[1]) / 1024 / 1024 : 0;
}

describeWithStack('inference replicas are a pool (real stack)', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-replicas-'));
  const artifacts = path.join(dir, 'artifacts');
  const cmds = workerCommands(artifacts);
  const workers: Proc[] = [];
  let restoreStackWorkers: () => Promise<void> = async () => {};
  let connection: Connection;
  let client: Client;

  beforeAll(async () => {
    if (!distBuilt()) throw new Error(`dist/workers is missing: run npm run build first (in ${REPO})`);
    restoreStackWorkers = await takeOverStackWorkers();
    connection = await Connection.connect({ address: '127.0.0.1:7233' });
    client = new Client({ connection });
    for (const c of [cmds.main(), cmds.rollout(), cmds.trainer()]) workers.push(startProc(c[0], c[1], [...c[2]], c[3], dir));
  });

  afterAll(async () => {
    for (const p of workers) await killProc(p, 'SIGTERM');
    await connection?.close();
    await restoreStackWorkers();
  });

  test('two real CPU vLLMs, one killed for good mid-step: not run (this test starts no second vLLM), see the next test', async () => {
    const avail = await memAvailableGiB();
    // Loud, never silent: this variant does not run, and says why.
    console.warn('SKIPPED (loudly): this test starts no second CPU vLLM. One SmolLM2 CPU vLLM holds about 6 GiB here (API server, ' +
      'engine core, worker); when the test was written the shared 24 GiB machine had about 3 GiB available, so a second one could not ' +
      `be started beside the stack's (MemAvailable now: ${avail.toFixed(1)} GiB). The next test runs the stack's one real vLLM plus a ` +
      'second replica that is killed for good (a forwarder to it, then a dead port).');
  });

  test('one replica of two killed for good in the middle of step 1: the step completes, its rollouts finish on the live replica, the sync records it behind', async () => {
    const doomed = await forwarder(DOOMED_PORT, 8000);
    let killed = false;
    try {
      // Every turn a tool call: episodes of several turns, so the kill can land mid-episode.
      const configPath = await tinyConfig(dir, {
        name: 'replicas', asyncLevel: 0, sampling: 'tool_choice = "required"',
        tables: `[inference]\nbase_urls = ["${LIVE}", "${DOOMED}"]\nsync_quorum = 1`,
      });
      const runId = `it-replicas-${Date.now()}`;
      const input: TrainRunInput = { configPath, runId, trainerTimeouts: { scheduleToStart: '30 seconds', heartbeat: '30 seconds' } };
      const handle = await client.workflow.start<typeof TrainRun>('TrainRun', { taskQueue: 'ratchet', workflowId: runId, args: [input] });

      // Step 1's rollouts are in their episodes once their sandboxes run; the second replica is killed,
      // for good, once it has sampled a step-1 turn (mid-episode for the rollout pinned to it, unless
      // that turn ended its episode), or 20 s into the step.
      const deadline = Date.now() + 900_000;
      let inStep1: { at: number; turns: number } | undefined;
      while (!killed && Date.now() < deadline) {
        if (!inStep1 && await containersOf(runId, 1) > 0) inStep1 = { at: Date.now(), turns: doomed.turns() };
        if (inStep1 && (doomed.turns() > inStep1.turns || Date.now() - inStep1.at > 20_000)) {
          await doomed.kill();
          killed = true;
          console.warn(`killed replica ${DOOMED} for good, ${Date.now() - inStep1.at} ms into step 1, after ${doomed.turns() - inStep1.turns} step-1 turn(s) on it`);
        } else {
          await sleep(100);
        }
      }
      expect(killed).toBe(true);

      const res = await handle.result();
      expect(res).toMatchObject({ stepsCompleted: 2, policyVersion: 2, stopped: 'completed' });
      const records = await checkInvariants({ artifacts, runId, maxSteps: 2, rolloutsPerStep: 2, inferenceUrl: LIVE });
      // Step 0's version reached both; step 1's sync (of v2) found the killed replica down: recorded behind, the run went on.
      expect(records[0]!.weight_sync?.behind).toBeUndefined();
      expect(records[1]!.weight_sync?.behind).toEqual([DOOMED]);

      // Every rollout of step 1 finished (none dropped as infra_error), each turn on a replica that
      // answered; after the kill only the live one did. Step 0's spread over both.
      const turns = async (step: number) => {
        const summaries = JSON.parse(await fs.readFile(path.join(artifacts, 'runs', runId, 'steps', String(step), 'rollouts', 'summaries.json'), 'utf8')) as RolloutSummary[];
        return Promise.all(summaries.map(async (s) => {
          expect(s.stop_reason).not.toBe('infra_error');
          const t = JSON.parse(await fs.readFile(uriToPath(s.trajectory.uri), 'utf8')) as Trajectory;
          return t.turns.map((turn) => turn.replica);
        }));
      };
      const step0 = (await turns(0)).flat();
      expect(new Set(step0)).toEqual(new Set([LIVE, DOOMED]));
      const step1 = await turns(1);
      console.warn(`replicas per step-1 rollout (turn by turn): ${JSON.stringify(step1)}`);
      // Once a rollout moved to the live replica it never went back to the dead one; the rollout pinned
      // to the killed replica used the live one for every turn after the kill.
      for (const r of step1) {
        expect(r.length).toBeGreaterThan(0);
        expect(r.every((u) => u === LIVE || u === DOOMED)).toBe(true);
        const firstLive = r.indexOf(LIVE);
        if (firstLive >= 0) expect(r.slice(firstLive).every((u) => u === LIVE)).toBe(true);
      }
      expect(step1.flat()).toContain(LIVE);
      const moved = step1.filter((r) => r.includes(DOOMED) && r.includes(LIVE)).length;
      console.warn(`${moved} step-1 rollout(s) moved from the killed replica to the live one mid-episode`);
    } finally {
      if (!killed) await doomed.kill();
    }
  }, 1_200_000);
});

/** Sandboxes of the run's step (by container name: ratchet-<run>-s<step>-...). */
async function containersOf(runId: string, step: number): Promise<number> {
  const { execFileSync } = await import('node:child_process');
  return execFileSync('docker', ['ps', '-q', '--filter', `name=ratchet-${runId}-s${step}-`], { encoding: 'utf8' }).split('\n').filter(Boolean).length;
}
