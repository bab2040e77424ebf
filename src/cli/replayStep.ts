/**
 * `ratchet replay-step <run> <step>` (docs/operations.md#step-replay): re-runs the trainer's update
 * of one recorded step from its stored batch and the checkpoint it started from, in the trainer's
 * Python (`python -m ratchet_trainer.replay`, trainer/ratchet_trainer/replay.py), and compares the
 * adapter it produces with the recorded adapter's sha256: bit for bit on the CPU, or within
 * --tolerance on the adapter tensors (a GPU's kernels are not bitwise reproducible).
 */
import { spawn } from 'node:child_process';
import * as path from 'node:path';
import type { Command } from 'commander';
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import { defaultStore, storeFor } from '../artifacts/stores';
import type { StepRecord } from '../contracts/records';
import { readStepRecords } from '../records/runRecords';
import { paths, REPO_ROOT } from '../shared/paths';
import { CliError, EXIT } from './exit';
import { runArtifactsIfReachable } from './runStore';
import { c } from './term';

/** What ratchet_trainer.replay reads (its module docstring). */
export interface ReplayRequest {
  run_id: string;
  step: number;
  batch: ArtifactRef;
  manifest: ArtifactRef;
  checkpoint: ArtifactRef;
  adapter: ArtifactRef;
  parent_checkpoint: ArtifactRef | null;
  lr?: number;
  store?: StoreSettings;
  tolerance?: number;
  device?: string;
  threads?: number;
}

/** What it prints (stdout, one JSON object). */
export interface ReplayResult {
  run_id: string;
  step: number;
  recorded_adapter_sha256: string;
  adapter_sha256: string;
  match: boolean;
  passed: boolean;
  parent_checkpoint: string | null;
  device: string;
  threads: number;
  max_abs_diff?: number;
  max_rel_diff?: number;
  /** The adapter tensors bit for bit, and adapter_config.json alike up to the order of peft's set-valued lists. */
  same_tensors?: boolean;
  same_config?: boolean;
  /** Both: an adapter recorded before its config was written in one order (0.7), whose sha256 no other process reproduces. */
  same_contents?: boolean;
  tolerance?: number;
  compare_error?: string;
}

/**
 * The checkpoint the step's update started from: the earlier step's checkpoint the lineage names (by
 * sha256), null for the run's initial adapter. Records from before lineage: the newest earlier checkpoint.
 */
export function parentCheckpoint(records: readonly StepRecord[], rec: StepRecord): ArtifactRef | null {
  const earlier = records.filter((r) => r.step < rec.step && r.checkpoint).sort((a, b) => b.step - a.step);
  if (!rec.lineage) return earlier[0]?.checkpoint ?? null;
  const wanted = rec.lineage.trainer.parent_checkpoint_sha256;
  if (!wanted) return null;
  const hit = earlier.find((r) => r.checkpoint!.sha256 === wanted);
  if (!hit) {
    throw new CliError(`run ${rec.run_id} step ${rec.step} started from checkpoint sha256 ${wanted}, which no earlier step of the run recorded ` +
      '(a run started from another run\'s checkpoint?), so its update cannot be replayed from here', EXIT.notFound);
  }
  return hit.checkpoint!;
}

/** The replay request for `step` of the run's winning records; a step with nothing to replay is a clear error. */
export function replayRequest(records: readonly StepRecord[], step: number, opts: { store?: StoreSettings; tolerance?: number; device?: string; threads?: number } = {}): ReplayRequest {
  const rec = records.find((r) => r.step === step);
  if (!rec) throw new CliError(`run has no recorded step ${step} (recorded: ${records.map((r) => r.step).join(', ') || 'none'})`, EXIT.notFound);
  const trained = rec.trainer.skipped !== true && rec.batch && rec.checkpoint && rec.adapter;
  if (!trained || !rec.batch) {
    const why = rec.error ? `${rec.error.type}: ${rec.error.message}` : rec.adapter ? 'the trainer skipped it' : 'no adapter recorded (full fine-tuning?)';
    throw new CliError(`run ${rec.run_id} step ${step} trained nothing to replay (${why})`, EXIT.notReady);
  }
  const recordedSha = rec.lineage?.trainer.adapter_sha256;
  if (recordedSha && recordedSha !== rec.adapter!.sha256) {
    throw new CliError(`run ${rec.run_id} step ${step}: the record's adapter sha256 ${rec.adapter!.sha256} differs from its lineage's ${recordedSha}: the record is inconsistent`, EXIT.invalidInput);
  }
  return {
    run_id: rec.run_id,
    step,
    batch: rec.batch.batch,
    manifest: rec.batch.manifest,
    checkpoint: rec.checkpoint!,
    adapter: rec.adapter!,
    parent_checkpoint: parentCheckpoint(records, rec),
    ...(rec.lineage ? { lr: rec.lineage.trainer.learning_rate } : {}),
    ...(opts.store ? { store: opts.store } : {}),
    ...(opts.tolerance !== undefined ? { tolerance: opts.tolerance } : {}),
    ...(opts.device ? { device: opts.device } : {}),
    // The trainer's CPU thread count, as it reported it (0.7 on), unless --threads says otherwise.
    ...(opts.threads ?? rec.lineage?.trainer.code?.threads ? { threads: opts.threads ?? rec.lineage!.trainer.code!.threads! } : {}),
  };
}

/** One line per replayed step: the verdict, both hashes, the tensor difference where it was measured. */
export function replayText(r: ReplayResult): string {
  const diff = r.max_abs_diff !== undefined ? ` max |Δ| ${r.max_abs_diff.toExponential(2)} (relative ${r.max_rel_diff!.toExponential(2)})` : '';
  const verdict = r.match ? c.green('reproduced')
    : r.same_contents ? c.yellow('contents reproduced bit for bit; the sha256 differs only by the order of adapter_config.json\'s lists (an adapter written before 0.7)')
      : r.passed ? c.yellow(`within tolerance ${r.tolerance}`) : c.red('MISMATCH');
  return [
    `step ${r.step}: ${verdict} ${c.dim(`on ${r.device}, ${r.threads} threads, from ${r.parent_checkpoint ?? 'the initial adapter'}`)}`,
    `  recorded adapter sha256 ${r.recorded_adapter_sha256}`,
    `  replayed adapter sha256 ${r.adapter_sha256}${diff}`,
    ...(r.compare_error ? [c.dim(`  tensors not compared: ${r.compare_error}`)] : []),
  ].join('\n');
}

/**
 * Runs ratchet_trainer.replay on the requests in one process (torch loads once, not once a step); each
 * result as it finishes to `onResult`, all of them returned. A bad request is a CliError with its message.
 */
export async function runReplays(reqs: ReplayRequest[], onResult: (r: ReplayResult) => void = () => undefined,
  python = path.join(paths.venv('trainer'), 'bin', 'python')): Promise<ReplayResult[]> {
  const child = spawn(python, ['-m', 'ratchet_trainer.replay', '--request', '-'], { cwd: path.join(REPO_ROOT, 'trainer'), stdio: ['pipe', 'pipe', 'inherit'] });
  const results: ReplayResult[] = [];
  let error: (ReplayResult & { error?: string; message?: string }) | undefined;
  let pending = '';
  const take = (line: string) => {
    if (!line.trim()) return;
    let parsed: ReplayResult & { error?: string; message?: string };
    try {
      parsed = JSON.parse(line);
    } catch {
      return; // not a result line
    }
    if (parsed.error) error = parsed;
    else { results.push(parsed); onResult(parsed); }
  };
  child.stdout.on('data', (d: Buffer) => {
    const lines = (pending + d.toString('utf8')).split('\n');
    pending = lines.pop() ?? '';
    lines.forEach(take);
  });
  const code = await new Promise<number>((resolve, reject) => {
    child.on('error', (e) => reject(new CliError(`could not start the trainer's python ${python}: ${e.message}. Fix: bash infra/trainer-env.sh (or set RATCHET_HOME)`, EXIT.stackUnavailable)));
    child.on('close', (n) => resolve(n ?? 1));
    child.stdin.end(JSON.stringify(reqs));
  });
  take(pending);
  const next = reqs[results.length];
  if (error) throw new CliError(`step ${next?.step ?? '?'}: ${error.error}: ${error.message}`, EXIT.invalidInput);
  if (results.length < reqs.length) {
    throw new CliError(`ratchet_trainer.replay exited ${code} after ${results.length} of ${reqs.length} steps without a result for step ${next?.step} (see its output above)`, EXIT.failure);
  }
  return results;
}

export function register(program: Command): void {
  program.command('replay-step')
    .description("re-run a step's trainer update from its stored batch and the previous checkpoint; compare the adapter's sha256 with the recorded one")
    .argument('<run>', 'run id')
    .argument('<step>', "a trained step, or 'all' for every trained step")
    .option('--tolerance <x>', 'pass when the adapter tensors differ by at most x times their largest magnitude (GPU replays; default: bit for bit)', parseFloat)
    .option('--device <device>', 'cpu or cuda (default: the device the run trained on, as its checkpoint recorded)')
    .option('--threads <n>', 'torch CPU threads (default: the count the trainer reported in the lineage, else torch\'s default)', (v) => parseInt(v, 10))
    .option('--config <file>', "the run's config file: read the run from its [artifacts] store (default: the store the run recorded in its memo)")
    .option('--json', 'the results as JSON')
    .addHelpText('after', '\nExit codes: 1 when a replayed adapter differs from the recorded one (both hashes printed), 3 no such run or step, 6 a step that trained nothing.\n\n' +
      'Examples:\n  $ ratchet replay-step smoke-1 3\n  $ ratchet replay-step smoke-1 all\n  $ ratchet replay-step gpu-run-1 12 --device cuda --tolerance 1e-3')
    .action(async (run: string, stepArg: string, o: { tolerance?: number; device?: string; threads?: number; config?: string; json?: boolean }, cmd: Command) => {
      if (o.tolerance !== undefined && !(o.tolerance >= 0)) throw new CliError('--tolerance must be a number >= 0 (e.g. 1e-3)', EXIT.usage);
      if (o.device !== undefined && !['cpu', 'cuda'].includes(o.device)) throw new CliError(`--device must be cpu or cuda, got ${o.device}`, EXIT.usage);
      if (o.threads !== undefined && !(o.threads >= 1)) throw new CliError('--threads must be an integer >= 1', EXIT.usage);
      const all = stepArg === 'all';
      const n = Number(stepArg);
      if (!all && (!Number.isInteger(n) || n < 0)) throw new CliError(`<step> must be a step number or 'all', got ${stepArg}`, EXIT.usage);
      const artifacts = await runArtifactsIfReachable(run, o.config, cmd.optsWithGlobals());
      const store = storeFor(artifacts, defaultStore());
      const records = await readStepRecords(store, run);
      if (!records.length) throw new CliError(`run ${run}: no step records under ${store.url} (a run id typo, or another store: --config)`, EXIT.notFound);
      // The trainer reads s3:// refs through the same store settings the run's activities carry.
      const settings = artifacts ?? (store.url.startsWith('s3://') ? { url: store.url } : undefined);
      const opts = { store: settings, tolerance: o.tolerance, device: o.device, threads: o.threads };
      const steps = all ? records.filter((r) => r.trainer.skipped !== true && r.batch && r.adapter).map((r) => r.step) : [n];
      // Every request built (and checked) before the trainer starts; then one process replays them in turn.
      const results = await runReplays(steps.map((s) => replayRequest(records, s, opts)), (r) => { if (!o.json) console.log(replayText(r)); });
      if (o.json) console.log(JSON.stringify(results, null, 1));
      const failed = results.filter((r) => !r.passed);
      if (failed.length) {
        throw new CliError(failed.map((r) => `step ${r.step}: replayed adapter sha256 ${r.adapter_sha256} != recorded ${r.recorded_adapter_sha256}`).join('\n'), EXIT.failure);
      }
    });
}
