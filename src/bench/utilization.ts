/**
 * bench:utilization — how busy inference is with async_level 0 against 1, on the
 * real CPU stack, in one run of this bench: two small TrainRuns (same config but
 * async_level, same seed, same tasks) one after the other, while vLLM's own
 * Prometheus gauge `vllm:num_requests_running` is sampled. Busy share = the part
 * of the run's wall time with at least one request running. async_level 0 is the
 * baseline: its inference idles while the trainer trains.
 *
 * Needs `ratchet up` (Temporal, vLLM, workers, trainer) and `npm run build`.
 * Writes its table between the bench:utilization markers in BENCHMARKS.md.
 *   npm run bench:utilization [-- --steps 3 --batch 2 --rollouts 2]
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LocalArtifactStore } from '../artifacts/store';
import { readStepRecords } from '../records/runRecords';
import { connectClient } from '../cli/temporal';
import { DEFAULTS, TASK_QUEUES } from '../shared/paths';
import { machineLine, writeBenchSection } from './benchmarksFile';
import type { TrainRunInput, TrainRunResult } from '../contracts';

const arg = (name: string, fallback: string): number => {
  const i = process.argv.indexOf(`--${name}`);
  return Number(i >= 0 ? process.argv[i + 1] : fallback);
};
const STEPS = arg('steps', '3');
const BATCH = arg('batch', '2');
const ROLLOUTS = arg('rollouts', '2');
const SAMPLE_MS = 250;

const metricsUrl = (): string => DEFAULTS.inferenceUrl.replace(/\/v1\/?$/, '/metrics');

/** Requests running in vLLM now (summed over models/engines), or undefined when unreachable. */
async function runningRequests(): Promise<number | undefined> {
  try {
    const text = await (await fetch(metricsUrl())).text();
    let sum = 0;
    let seen = false;
    for (const line of text.split('\n')) {
      if (line.startsWith('vllm:num_requests_running')) {
        sum += Number(line.slice(line.lastIndexOf(' ') + 1));
        seen = true;
      }
    }
    return seen ? sum : undefined;
  } catch {
    return undefined;
  }
}

function config(dir: string, asyncLevel: number): string {
  const file = path.join(dir, `util-a${asyncLevel}.toml`);
  writeFileSync(file, `name = "bench-utilization"
[trainer]
device = "cpu"
[sampling]
max_tokens = 48
[orchestrator]
batch_size = ${BATCH}
rollouts_per_example = ${ROLLOUTS}
max_steps = ${STEPS}
async_level = ${asyncLevel}
max_concurrent_rollouts = ${BATCH * ROLLOUTS}
seed = 0
[[env]]
id = "swe-grep"
[env.args]
max_tokens = 384
max_tool_calls = 4
max_turns = 4
`);
  return file;
}

interface Measured { asyncLevel: number; wallS: number; busyShare: number; meanRunning: number; stepS: number[]; trainS: number; staleness: number; reward: number }

async function measure(dir: string, asyncLevel: number): Promise<Measured> {
  const { client, close } = await connectClient();
  const runId = `bench-util-a${asyncLevel}-${Date.now().toString(36)}`;
  const input: TrainRunInput = { configPath: config(dir, asyncLevel), runId };
  const samples: number[] = [];
  let done = false;
  const sampler = (async () => {
    while (!done) {
      const n = await runningRequests();
      if (n === undefined) throw new Error(`no vllm:num_requests_running at ${metricsUrl()}. Fix: ratchet up (vLLM serves /metrics)`);
      samples.push(n);
      await new Promise((r) => setTimeout(r, SAMPLE_MS));
    }
  })();
  const t0 = performance.now();
  try {
    process.stderr.write(`async_level ${asyncLevel}: run ${runId} (${STEPS} steps of ${BATCH}x${ROLLOUTS} rollouts)\n`);
    await client.workflow.execute('TrainRun', { taskQueue: TASK_QUEUES.main, workflowId: runId, args: [input] }) as TrainRunResult;
  } finally {
    done = true;
    await close();
  }
  const wallS = (performance.now() - t0) / 1000;
  await sampler;
  const records = await readStepRecords(new LocalArtifactStore(), runId);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  return {
    asyncLevel,
    wallS,
    busyShare: samples.filter((n) => n > 0).length / Math.max(1, samples.length),
    meanRunning: mean(samples),
    stepS: records.map((r) => (r.timing_ms.step ?? 0) / 1000),
    trainS: mean(records.map((r) => (r.timing_ms.train_and_save ?? 0) / 1000)),
    staleness: mean(records.map((r) => r.mean_staleness)),
    reward: mean(records.map((r) => r.mean_reward)),
  };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-util-'));
  const base = await measure(dir, 0);
  const overlap = await measure(dir, 1);
  const row = (m: Measured) => `| ${m.asyncLevel} | ${m.wallS.toFixed(0)} | ${m.stepS.map((s) => s.toFixed(0)).join(', ')} | ${m.trainS.toFixed(0)} | ` +
    `${(100 * m.busyShare).toFixed(1)}% | ${m.meanRunning.toFixed(2)} | ${m.staleness.toFixed(2)} |`;
  const section = writeBenchSection('utilization', [
    '### Inference utilization, async_level 0 vs 1 (real CPU stack)',
    '',
    `Two TrainRuns of ${STEPS} steps, ${BATCH} tasks x ${ROLLOUTS} rollouts (swe-grep, SmolLM2-135M on vLLM CPU, Docker`,
    'sandboxes, the Python trainer on CPU), identical but for async_level, one after the other in the same',
    `bench run. vLLM's \`vllm:num_requests_running\` sampled every ${SAMPLE_MS} ms; busy = at least one request running.`,
    '',
    `Command: \`npm run bench:utilization -- --steps ${STEPS} --batch ${BATCH} --rollouts ${ROLLOUTS}\` (source \`src/bench/utilization.ts\`).`,
    `Machine: ${machineLine()}.`,
    '',
    '| async_level | run wall s | step wall s | train + save s (mean) | inference busy | mean requests running | mean staleness |',
    '| --- | ---: | --- | ---: | ---: | ---: | ---: |',
    row(base),
    row(overlap),
    '',
    `Ratio async 1 / async 0: run wall ${(overlap.wallS / base.wallS).toFixed(2)}, inference busy share ${(overlap.busyShare / Math.max(1e-9, base.busyShare)).toFixed(2)}.`,
    'On 2 cores the trainer and vLLM compete for the same CPUs, so overlap buys less here than on a',
    'machine where they have their own devices.',
  ]);
  process.stdout.write(`${section}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
