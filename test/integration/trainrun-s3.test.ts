/**
 * A real TrainRun whose artifacts live in S3 (MinIO from infra/minio.sh), with
 * every worker on a PRIVATE artifact directory, so nothing can pass between them
 * through a path: trajectories, batches, checkpoints, adapters, step records and
 * run state all go through s3://. Weight sync goes through an inference-host
 * worker (inference.sync_task_queues) that pulls each adapter from S3 into its own
 * cache before vLLM loads it. Tiny: 1 task x 2 rollouts, 2 steps. Storage stays bounded (issue 42):
 * the run's [artifacts.retention] deletes journals in MinIO as it goes, the trainer drops its staging
 * copies, and `ratchet gc` on the finished run deletes exactly what its dry run lists.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { readStepRecords } from '../../src/activities/metrics';
import type { ArtifactRef } from '../../src/artifacts/ref';
import { S3ArtifactStore } from '../../src/artifacts/s3';
import { startTrainRun } from '../../src/workflows/client';
import { resolveTaskset } from '../../src/evals/tasksets';
import { storeFor, defaultStore } from '../../src/artifacts/stores';
import { evalInputFromFlags } from '../../src/cli/evalInput';
import { runArtifacts } from '../../src/cli/runStore';
import { generateReport } from '../../src/report';
import { writeTaskSubset } from '../../src/tasks/subset';
import type { EvalSweepResult } from '../../src/contracts/eval';
import { MINIO, REPO, describeWithStack, useMinioCredentials } from '../helpers/stack';
import { distBuilt, killProc, startProc, takeOverStackWorkers, tinyConfig, workerCommands, type Proc } from '../helpers/trainrunStack';

const run = promisify(execFile);
const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const QUEUE = `ratchet-inference-it-${process.pid}`;

// Two real CPU steps with private worker dirs and an eval sweep: ~1.5 minutes, part of CI.
describeWithStack('TrainRun with an s3:// artifact store (real MinIO, private worker dirs)', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv', 'minio'], () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-trainrun-s3-'));
  const privateDir = (name: string) => path.join(dir, `${name}-artifacts`);
  const procs: Proc[] = [];
  let connection: Connection;
  let client: Client;
  let restoreStackWorkers: () => Promise<void> = async () => {};
  const prefix = `it-trainrun-${Date.now()}`;
  const url = `s3://${MINIO.bucket}/${prefix}`;
  let trainedRunId: string | undefined;

  beforeAll(async () => {
    if (!distBuilt()) throw new Error(`dist/workers is missing: run npm run build first (in ${REPO})`);
    useMinioCredentials();
    restoreStackWorkers = await takeOverStackWorkers();
    connection = await Connection.connect({ address: '127.0.0.1:7233' });
    client = new Client({ connection });
    const main = workerCommands(privateDir('main')).main();
    const rollout = workerCommands(privateDir('rollout')).rollout();
    const trainer = workerCommands(privateDir('trainer')).trainer();
    for (const c of [main, rollout, trainer]) procs.push(startProc(c[0], c[1], [...c[2]], c[3], dir));
    // The inference host's worker: its own RATCHET_HOME, so its adapter cache is its own too.
    const infHome = path.join(dir, 'inference-home');
    await fs.mkdir(infHome, { recursive: true });
    procs.push(startProc('worker-inference', process.execPath, [path.join(REPO, 'dist', 'workers', 'inference.js')],
      { RATCHET_HOME: infHome, RATCHET_ARTIFACTS: privateDir('inference'), RATCHET_INFERENCE_QUEUE: QUEUE, RATCHET_INFERENCE_URL: INFERENCE }, dir));
  });

  afterAll(async () => {
    for (const p of procs) await killProc(p, 'SIGTERM');
    await connection?.close();
    await restoreStackWorkers();
  });

  test('two steps train through S3; every ref is s3:// and verifies; vLLM serves the adapter the inference host pulled', async () => {
    const base = await tinyConfig(dir);
    const config = path.join(dir, 'tiny-s3.toml');
    const text = (await fs.readFile(base, 'utf8')).replace('[sampling]', `[inference]\nsync_task_queues = ["${QUEUE}"]\n[sampling]`);
    // [artifacts.retention]: the run deletes each recorded step's turn journals in MinIO as it goes (issue 42).
    await fs.writeFile(config, `${text}[artifacts]\nurl = "${url}"\nendpoint = "${MINIO.endpoint}"\n[artifacts.retention]\nkeep_last = 2\n`);
    const runId = `it-trainrun-s3-${Date.now()}`;
    const result = await (await startTrainRun(client, config, { runId })).result();
    trainedRunId = runId;
    expect(result).toMatchObject({ stepsCompleted: 2, policyVersion: 2, stopped: 'completed' });

    const store = new S3ArtifactStore({ url, endpoint: MINIO.endpoint }, path.join(dir, 'checker-cache'));
    const records = await readStepRecords(store, runId);
    expect(records.map((r) => r.step)).toEqual([0, 1]);
    for (const r of records) {
      expect(r.rollouts).toBe(2);
      const b = r.batch as { batch: ArtifactRef; manifest: ArtifactRef };
      for (const ref of [b.batch, b.manifest, r.checkpoint as ArtifactRef, r.adapter as ArtifactRef]) expect(ref.uri.startsWith(`${url}/runs/${runId}/`)).toBe(true);
      await store.get(b.batch);
      await store.get(b.manifest);
      await store.localDir(r.adapter as ArtifactRef);
    }
    const last = records[records.length - 1]!;
    const ckpt = await store.localDir(last.checkpoint as ArtifactRef);
    expect(Object.keys(JSON.parse(await fs.readFile(path.join(ckpt, 'ledger.json'), 'utf8')) as object).map(Number)).toEqual([0, 1]);
    expect((JSON.parse(await fs.readFile(path.join(ckpt, 'trainer_state.json'), 'utf8')) as { optimizer_steps: number }).optimizer_steps).toBe(2);
    expect(JSON.parse((await store.read(`runs/${runId}/state.json`))!.toString()).nextStep).toBe(2);
    // The step summaries travelled as one artifact.
    expect(await store.exists(`runs/${runId}/steps/1/rollouts/summaries.json`)).toBeDefined();

    // Nothing of the run in the TS workers' private directories: it all went through S3.
    for (const name of ['main', 'rollout', 'inference']) expect(existsSync(path.join(privateDir(name), 'runs', runId))).toBe(false);
    // The inference host loaded the adapter from its own cache.
    expect(existsSync(path.join(dir, 'inference-home', 'cache', 's3', MINIO.bucket, prefix, 'runs', runId))).toBe(true);
    // The final version was served (its sync is on the last record), and the ended run released
    // its adapters: vLLM serves none of them now.
    expect((last as unknown as { weight_sync?: { policyVersion?: number; adapter?: string } }).weight_sync?.policyVersion).toBe(2);
    const models = (await (await fetch(`${INFERENCE}/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id).filter((id) => id.startsWith(`${runId}/`))).toEqual([]);

    // Storage stays bounded (issue 42). The trainer's staging copies went once uploaded.
    const staging = path.join(privateDir('trainer'), 'runs', runId, 'checkpoints');
    expect(existsSync(staging) ? (await fs.readdir(staging)).filter((n) => n.startsWith('step-')) : []).toEqual([]);
    // Each recorded step's turn journals went, and the run recorded what it deleted.
    const keys = await store.list(`runs/${runId}`);
    expect(keys.filter((k) => k.includes('/steps/') && k.includes('.journal/'))).toEqual([]);
    const applied = await Promise.all(keys.filter((k) => k.includes('/records/retention/')).map(async (k) => JSON.parse((await store.read(k))!.toString()) as { by: string; deleted: { keys: number } }));
    expect(applied.length).toBeGreaterThan(0);
    expect(applied.every((r) => r.by === 'run' && r.deleted.keys > 0)).toBe(true);
    // The inference host's download cache keeps what vLLM served (vLLM's own /v1/models roots): the last version's adapter.
    const served = JSON.parse(await fs.readFile(path.join(dir, 'inference-home', 'cache', 's3', 'served.json'), 'utf8')) as Record<string, string[]>;
    expect(Object.values(served).flat().some((d) => d.includes(`/runs/${runId}/checkpoints/${(last.adapter as ArtifactRef).uri.split('/').slice(-2, -1)[0]}/adapter/`))).toBe(true);
  }, 1_500_000);

  test('ratchet eval and ratchet report find the run in S3 through its memo: results written there, report read from there', async () => {
    if (!trainedRunId) throw new Error('the training test above did not finish: nothing to evaluate');
    const runId = trainedRunId;
    const taskset = path.join(dir, 'heldout-1.jsonl');
    expect(writeTaskSubset(resolveTaskset('heldout').file, 1, taskset)).toBe(1);
    // What `ratchet eval --run <id> --versions 2 --k 1` builds: no --config, so the store comes from the run's memo.
    const input = await evalInputFromFlags(client, { run: runId, versions: '2', taskset, k: '1', force: true });
    expect(input.artifacts).toMatchObject({ url, endpoint: MINIO.endpoint });
    const res = await client.workflow.execute('EvalSweep', { taskQueue: 'ratchet', workflowId: `${runId}-eval-s3`, args: [input] }) as EvalSweepResult;
    expect(res.evaluated.map((e) => [e.version, e.episodes])).toEqual([[2, 1]]);

    const store = new S3ArtifactStore({ url, endpoint: MINIO.endpoint }, path.join(dir, 'checker-cache-eval'));
    expect((await store.exists(res.evaluated[0]!.key))?.uri).toBe(`${url}/${res.evaluated[0]!.key}`);
    for (const name of ['main', 'rollout', 'inference']) expect(existsSync(path.join(privateDir(name), 'runs', runId, 'evals'))).toBe(false);

    // `ratchet report <id>`: the run's memo again; records and the eval result come from S3.
    const settings = await runArtifacts(runId, { client: async () => client });
    const report = await generateReport(runId, { out: path.join(dir, 'report.html'), store: storeFor(settings, defaultStore()) });
    expect([report.steps, report.evals]).toEqual([2, 1]);
  }, 900_000);

  test('ratchet gc on the finished run in MinIO: its dry run lists exactly what then goes; the checkpoints, records and trajectories stay', async () => {
    if (!trainedRunId) throw new Error('the training test above did not finish: nothing to collect');
    const runId = trainedRunId;
    const store = new S3ArtifactStore({ url, endpoint: MINIO.endpoint }, path.join(dir, 'checker-cache-gc'));
    const records = await readStepRecords(store, runId);
    // A losing save of step 0 (a redone step's other attempt, which no record names): step 0's objects copied under another batch hash.
    const step0 = (records[0]!.checkpoint as ArtifactRef).uri.split('/').pop()!;
    const losing = 'step-0-0123456789abcdef';
    for (const k of await store.list(`runs/${runId}/checkpoints/${step0}`)) await store.put(k.replace(`/${step0}/`, `/${losing}/`), (await store.read(k))!);
    const before = (await store.listSized(`runs/${runId}`)).map((o) => o.key);
    // What gc may delete, read off the listing: the losing save and every turn journal left (the eval episodes').
    const expected = before.filter((k) => k.includes(`/checkpoints/${losing}/`) || k.includes('.journal/')).sort();
    expect(expected.filter((k) => k.includes(losing)).length).toBeGreaterThan(2);

    const cli = async (...args: string[]) => (await run(process.execPath, [path.join(REPO, 'dist', 'cli', 'index.js'), 'gc', runId, '--json', ...args], {
      cwd: REPO, encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' },
    })).stdout;
    const dry = JSON.parse(await cli('--dry-run', '--keep-last', '2')) as { delete: { key: string }[] };
    expect(dry.delete.map((d) => d.key).sort()).toEqual(expected);
    expect((await store.listSized(`runs/${runId}`)).map((o) => o.key)).toEqual(before); // a dry run deletes nothing

    const done = JSON.parse(await cli('--keep-last', '2')) as { deleted: { keys: number }; pruned: { dir: string; kept: string }[] };
    expect(done.deleted.keys).toBe(expected.length);
    expect(done.pruned).toEqual([{ dir: losing, step: 0, kept: 'none' }]);
    const after = (await store.listSized(`runs/${runId}`)).map((o) => o.key);
    expect(after.filter((k) => !before.includes(k)).map((k) => path.posix.dirname(k))).toEqual([`runs/${runId}/records/retention`]);
    expect(after.filter((k) => before.includes(k))).toEqual(before.filter((k) => !expected.includes(k)));
    // What must stay stayed whole: each recorded step's checkpoint and adapter download and verify, its batch reads.
    for (const r of records) {
      await store.localDir(r.checkpoint as ArtifactRef);
      await store.localDir(r.adapter as ArtifactRef);
      await store.get((r.batch as { batch: ArtifactRef }).batch);
    }
    expect(after.some((k) => /\/steps\/1\/rollouts\/.+\.json$/.test(k) && !k.includes('.journal/'))).toBe(true);
  }, 300_000);
});
