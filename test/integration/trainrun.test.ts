/**
 * A real TrainRun end to end on the local stack: Temporal, vLLM (SmolLM2 on CPU),
 * Docker sandboxes, the Python trainer, and this repo's built workers (npm run build).
 * Tiny: 1 task x 2 rollouts, 2 steps, with the in-run eval cadence on (issue 30): each step's
 * checkpoint gets its own EvalSweep (named in the step record), run by the real plan, rollout
 * and record activities below training by priority; the run ends once its sweeps have, and each
 * sweep's result file names the sweep. Then lineage, step replay and the workers' metrics.
 * Slow on 2 CPUs (minutes).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, promises as fs } from 'node:fs';
import * as path from 'node:path';
import { describeWithStack, REPO, STATE } from '../helpers/stack';
import { LocalArtifactStore } from '../../src/artifacts/store';
import type { ReplayResult } from '../../src/cli/replayStep';
import { readStepRecords } from '../../src/records/runRecords';
import { defaultImage } from '../../src/sandbox/options';
import { startTrainRun } from '../../src/workflows/client';
import { progressQuery } from '../../src/workflows/messages';
import { EvalResult, type EvalSweepResult } from '../../src/contracts/eval';
import { EVAL_PRIORITY } from '../../src/shared/fairness';
import { writeTaskSubset } from '../../src/tasks/subset';
import { DEFAULT_METRICS_PORTS } from '../../src/workers/telemetry';
import { checkInvariants, tinyConfig, useStackWorkers } from '../helpers/trainrunStack';

const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const HELDOUT_SOURCES = [path.join(STATE, 'tasks', 'heldout.jsonl'), path.join(REPO, 'taskgen', 'fixtures', 'sample_tasks.jsonl')];

describeWithStack('TrainRun on the real stack', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  const stack = useStackWorkers('trainrun');
  const { dir, artifacts } = stack;

  let finishedRun: string | undefined;

  test('two steps train with an eval sweep of v1 and of v2 (every_steps = 1), every invariant holds', async () => {
    const source = HELDOUT_SOURCES.find((f) => existsSync(f));
    if (!source) throw new Error('no held-out task set in .ratchet/tasks or taskgen/fixtures. Fix: bash infra/tasks.sh');
    const heldout = path.join(dir, 'heldout-2.jsonl');
    writeTaskSubset(source, 2, heldout);
    const config = await tinyConfig(dir);
    await fs.appendFile(config, `[eval]\nevery_steps = 1\ntaskset = "${heldout}"\nk = 1\nmax_concurrent = 2\n`);
    const runId = `it-trainrun-${Date.now()}`;
    const handle = await startTrainRun(stack.client, config, { runId });
    const result = await handle.result();
    expect(result).toMatchObject({ stepsCompleted: 2, policyVersion: 2, stopped: 'completed' });
    const records = await checkInvariants({ artifacts, runId, maxSteps: 2, rolloutsPerStep: 2, inferenceUrl: INFERENCE });
    finishedRun = runId;

    // The eval cadence: one sweep per step's checkpoint, a child of the run, below training by priority.
    expect(records.map((r) => r.eval_sweep?.workflow_id)).toEqual([`${runId}-step-0-eval`, `${runId}-step-1-eval`]);
    for (const r of records) {
      const sweep = r.eval_sweep!;
      expect(sweep).toMatchObject({ policy_version: r.policy_version, taskset: heldout, k: 1, every_steps: 1 });
      const h = stack.client.workflow.getHandle(sweep.workflow_id);
      const res = await h.result() as EvalSweepResult;
      // Evaluated, or skipped only if something else evaluated the version on this task set first.
      expect([...res.evaluated.map((e) => e.version), ...res.skipped]).toEqual([r.policy_version]);
      const desc = await h.describe();
      expect(desc.raw.workflowExecutionInfo?.parentExecution?.workflowId).toBe(runId);
      expect(desc.raw.workflowExecutionInfo?.priority).toMatchObject({ priorityKey: EVAL_PRIORITY, fairnessKey: runId });
      const evalDir = path.join(artifacts, 'runs', runId, 'evals', String(r.policy_version));
      const files = (await fs.readdir(evalDir)).filter((f) => f.endsWith('.json'));
      expect(files).toHaveLength(1);
      const stored = EvalResult.parse(JSON.parse(await fs.readFile(path.join(evalDir, files[0]!), 'utf8')));
      expect(stored).toMatchObject({ run_id: runId, policy_version: r.policy_version, k: 1, episodes: 2, workflow_id: sweep.workflow_id });
    }
    // The run waited for its last sweep before it ended: the progress query has its outcome.
    const p = await handle.query(progressQuery);
    expect(p.lastEval).toMatchObject({ workflow_id: `${runId}-step-1-eval`, state: 'completed' });
  }, 2_400_000);

  // Issue 30: the finished CPU run's lineage names its task files and trainer code, and
  // `ratchet replay-step` reproduces every trained step's adapter sha256 bit for bit.
  test('lineage and step replay: every step of the finished run replays to its recorded adapter', async () => {
    if (!finishedRun) throw new Error('the two-step run above did not finish: nothing to replay');
    const records = await readStepRecords(new LocalArtifactStore(artifacts), finishedRun);
    const trained = records.filter((r) => r.trainer.skipped !== true && r.adapter);
    expect(trained.length).toBeGreaterThan(0);
    for (const r of trained) {
      expect(r.lineage?.tasks.files?.[0]?.sha256).toMatch(/^[0-9a-f]{64}$/);
      expect(r.lineage?.trainer.code?.sha256).toMatch(/^[0-9a-f]{64}$/);
      // Where its rollouts ran: the stack's sandbox image by id (as the docker CLI names it), and each env's sources.
      const image = r.lineage?.sandbox_image ?? defaultImage();
      const id = spawnSync('docker', ['image', 'inspect', '--format', '{{.Id}}', image], { encoding: 'utf8' }).stdout.trim();
      expect(r.lineage?.sandbox_image_digests).toEqual([id]);
      expect(r.lineage?.env_modules?.map((e) => e.id).sort()).toEqual([...new Set(r.lineage!.envs.map((e) => String(e.id)))].sort());
      for (const e of r.lineage?.env_modules ?? []) expect(e.sha256).toMatch(/^[0-9a-f]{64}$/);
    }
    // The command itself (dist build), as an operator runs it: each trained step replayed once, all in one trainer
    // process (torch loads once; the command runs the same replayRequest and runReplays).
    const cli = spawnSync(process.execPath, [path.join(REPO, 'dist', 'cli', 'index.js'), 'replay-step', finishedRun, 'all', '--json'],
      { env: { ...process.env, RATCHET_ARTIFACTS: artifacts }, encoding: 'utf8', timeout: 600_000 });
    expect(cli.status).toBe(0);
    // The results array is the command's last output; log lines (pino, stdout) may come before it.
    const replayed = JSON.parse(cli.stdout.slice(cli.stdout.lastIndexOf('\n[\n') + 1)) as ReplayResult[];
    expect(replayed.map((o) => o.step)).toEqual(trained.map((r) => r.step));
    for (const r of trained) {
      expect(replayed.find((o) => o.step === r.step)).toMatchObject({ step: r.step, match: true, passed: true, adapter_sha256: r.adapter!.sha256 });
    }
  }, 900_000);

  test('every worker serves Prometheus metrics: Ratchet counters and the Temporal SDK runtime', async () => {
    const scrape = async (port: number) => (await (await fetch(`http://127.0.0.1:${port}/metrics`)).text());
    const sum = (text: string, name: string) => text.split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
      .reduce((a, l) => a + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    const { main, rollout } = DEFAULT_METRICS_PORTS;
    const rolloutText = await scrape(rollout.ratchet);
    expect(sum(rolloutText, 'ratchet_rollouts_total')).toBeGreaterThanOrEqual(4); // 2 steps x 2 rollouts, the run above
    expect(rolloutText).toMatch(/ratchet_sandbox_pool\{state="busy"\} 0/);
    expect(sum(await scrape(main.ratchet), 'ratchet_steps_total')).toBeGreaterThanOrEqual(2);
    for (const port of [main.sdk, rollout.sdk]) expect(await scrape(port)).toMatch(/^temporal_\w+/m);
  });
});
