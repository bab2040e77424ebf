import type { Client, WorkflowExecutionDescription } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { loadEvalResults, loadStepRecords } from '../report/load';
import type { EvalResult } from '../contracts/eval';
import type { EvalSweepStarted } from '../contracts/records';
import type { LastEval } from '../contracts/run';
import type { ReportStep } from '../report/records';
import { readRestarting, restartingNote } from '../stack/supervisor';
import { progressQuery } from '../workflows/messages';
import type { ControlAction, Progress } from '../contracts';
import type { Cost, CostKey } from '../shared/cost';
import { CliError, EXIT } from './exit';
import { notFound } from './temporal';
import { c, fmtMs, fmtReward, ProgressBar } from './term';

/** One line per finished step: what people scan in a terminal. */
export function stepLine(r: ReportStep): string {
  const comps = Object.entries(r.components).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(' · ');
  const wall = Date.parse(r.finished_at) - Date.parse(r.started_at);
  return `${c.bold(`step ${String(r.step).padStart(4)}`)}  v${String(r.policy_version).padEnd(3)} reward ${c.cyan(fmtReward(r.reward.mean))} ±${r.reward.std.toFixed(3)}` +
    `  ${c.dim(comps ? `[${comps}]` : '')}  ${r.episodes ?? r.rollouts} eps${signalText(r)}  ${fmtMs(wall)}`;
}

/** Informative groups (of those rolled out), the version that sampled the step, refill rounds: absent from older records. */
function signalText(r: ReportStep): string {
  if (r.informative_groups === undefined) return '';
  const refill = r.refill_rounds ? ` in ${r.refill_rounds + 1} rounds` : '';
  const by = r.sampling_policy_version !== undefined ? ` · sampled by v${r.sampling_policy_version}` : '';
  return `  ${r.informative_groups}/${r.groups ?? '?'} informative groups${refill}${by}`;
}

/** One control action as `ratchet status` shows it: what, who, why. */
export function controlLine(a: ControlAction): string {
  const show = (k: string, v: unknown): string => (v && typeof v === 'object' ? Object.entries(v).map(([f, x]) => `${k}.${f}=${String(x)}`).join(' ') : `${k}=${String(v)}`);
  const changes = a.changes ? ` ${Object.entries(a.changes).map(([k, v]) => show(k, v)).join(' ')}` : '';
  return `  ${c.yellow(`⏵ ${a.action}${changes}`)} by ${a.identity} at step ${a.step} (${a.time})${a.reason ? `: ${a.reason}` : c.dim(': no reason given')}`;
}

const pct = (x: number | null | undefined): string => (x === null || x === undefined ? '—' : `${(x * 100).toFixed(1)}%`);

/** The eval sweep a step's record names (the in-run cadence): started on its checkpoint. */
export function evalSweepLine(s: EvalSweepStarted): string {
  return `  ${c.blue(`⏵ eval sweep ${s.workflow_id}`)} started on v${s.policy_version} (${s.taskset}, k=${s.k}, every ${s.every_steps} steps)`;
}

/** The run's newest in-run sweep as its progress query tells it: running, its result, or why it failed. */
export function lastEvalLine(e: LastEval): string {
  const head = `eval of v${e.policy_version} (after step ${e.step}, ${e.workflow_id})`;
  if (e.state === 'running') return `  ${c.dim(`${head}: running below training`)}`;
  if (e.state === 'failed') return `  ${c.red(`${head}: failed`)}: ${e.error ?? 'see the Web UI'}`;
  if (!e.result) return `  ${head}: done (already evaluated on ${e.taskset}; see ratchet report)`;
  return `  ${head}: pass@1 ${pct(e.result.passAt1)} · reward ${e.result.meanReward.toFixed(3)} · file F1 ${pct(e.result.fileF1)} · ${e.result.episodes} eps`;
}

/** The newest stored eval result (highest policy version, then newest finish): `ratchet status` shows it. */
export function latestEvalLine(results: EvalResult[]): string | undefined {
  const r = [...results].sort((a, b) => b.policy_version - a.policy_version || b.finished_at.localeCompare(a.finished_at))[0];
  if (!r) return undefined;
  return `latest eval: v${r.policy_version} on ${r.taskset.name} (k=${r.k}) pass@1 ${pct(r.pass_at?.['1'])} · reward ${r.reward.mean.toFixed(3)} · ` +
    `file F1 ${pct(r.localization.file?.f1)} · ${r.episodes} eps${r.workflow_id ? ` · ${r.workflow_id}` : ''}`;
}

async function latestEvalSoft(runId: string): Promise<string | undefined> {
  try {
    return latestEvalLine((await loadEvalResults(runId)).results);
  } catch {
    return undefined;
  }
}

const controlKey = (a: ControlAction): string => `${a.time}|${a.action}|${a.identity}`;

async function recordsSoft(runId: string): Promise<ReportStep[]> {
  try {
    return await loadStepRecords(runId);
  } catch {
    return []; // no data yet, or an older writer: the progress query still says where the run is
  }
}

async function queryProgress(client: Client, workflowId: string): Promise<Progress | undefined> {
  // A query needs a live worker; without one it would wait, so give up after a few seconds.
  const q = client.workflow.getHandle(workflowId).query(progressQuery);
  return Promise.race([q.catch(() => undefined), new Promise<undefined>((r) => setTimeout(() => r(undefined), 5_000).unref())]);
}

/** The trainer's own account of a running `trainer.step`, from its last heartbeat. */
export interface TrainerBeat {
  activity: string;
  microBatch?: number;
  microBatches?: number;
  attempt: number;
  /** Seconds since the last heartbeat, when the server knows it. */
  sinceBeatS?: number;
}

/**
 * The TrainRun's pending trainer activity, from Temporal's describe: its
 * heartbeat details carry {step, micro_batch, micro_batches}. Undefined when
 * no trainer activity is pending.
 */
export function trainerBeat(desc: WorkflowExecutionDescription, now = Date.now()): TrainerBeat | undefined {
  const pending = desc.raw.pendingActivities ?? [];
  const act = pending.find((a) => (a.activityType?.name ?? '').startsWith('trainer.'));
  if (!act) return undefined;
  const beat: TrainerBeat = { activity: act.activityType?.name ?? 'trainer', attempt: act.attempt ?? 1 };
  const payload = act.heartbeatDetails?.payloads?.[act.heartbeatDetails.payloads.length - 1];
  if (payload) {
    try {
      const d = defaultPayloadConverter.fromPayload<{ micro_batch?: number; micro_batches?: number }>(payload);
      if (typeof d?.micro_batch === 'number') beat.microBatch = d.micro_batch;
      if (typeof d?.micro_batches === 'number') beat.microBatches = d.micro_batches;
    } catch { /* encrypted or foreign details: the phase alone still shows */ }
  }
  const last = act.lastHeartbeatTime?.seconds;
  if (last !== undefined && last !== null) beat.sinceBeatS = Math.max(0, Math.round(now / 1000 - Number(last)));
  return beat;
}

const PHASE_WORDS: Record<string, string> = {
  init: 'starting',
  sampling: 'sampling tasks',
  rollouts: 'rollouts',
  'building-batch': 'building the batch',
  training: 'training',
  saving: 'saving the checkpoint',
  'weight-sync': 'loading the new adapter into inference (weight sync)',
  metrics: 'recording the step',
  idle: 'between steps',
};

/** What to do about a wait whose cause is not obvious from its name (docs/errors.md). */
const STATUS_HINTS: Record<string, string> = {
  'waiting-for-rollout-workers': ' (no rollout worker runs or polls ratchet-rollout: start one, e.g. `ratchet up`; the rollouts wait queued)',
  'waiting-for-healthy-rollout-hosts': ' (every rollout host took itself out of service; each goes back once its health probe passes: fix what it names, docs/errors.md)',
};

/** One line per phase change of the current step: what a newcomer watches move. */
export function phaseLine(p: Progress, beat?: TrainerBeat): string {
  let what = PHASE_WORDS[p.phase] ?? p.phase;
  if (p.phase === 'rollouts') what += ` ${p.rolloutsDone}/${p.rolloutsTotal}`;
  if (p.phase === 'training' && beat?.microBatches) what += ` micro-batch ${beat.microBatch ?? 0}/${beat.microBatches}`;
  if ((p.phase === 'training' || p.phase === 'saving') && beat && beat.attempt > 1) what += ` (attempt ${beat.attempt})`;
  const ahead = p.prefetchedStep !== undefined && p.prefetchedStep !== p.step ? ` · step ${p.prefetchedStep}'s rollouts running ahead` : '';
  const b = p.budgetExhausted;
  const hint = p.status === 'budget-exhausted' && b
    ? ` (${b.key} ${b.spent} of ${b.budget}: raise it with \`ratchet set ${p.runId} --budget ${b.key}=<value> --reason ...\`)`
    : STATUS_HINTS[p.status] ?? '';
  const hosts = (p.unhealthyRolloutHosts ?? []).map((h) => ` · ${h.host}: ${h.error}`).join('');
  const st = p.status === 'running' ? '' : ` · ${p.status}${hint}`;
  return `step ${p.step}/${p.maxSteps} · ${what}${ahead}${st}${hosts}`;
}

/** The run's cost so far (the cost ledger), in one line. */
export function costLine(cost: Partial<Cost>): string {
  const n = (k: CostKey) => cost[k] ?? 0;
  return `cost: sandboxes ${n('sandbox_containers')} (${n('sandbox_container_s').toFixed(0)} container-s, ${n('sandbox_cpu_s').toFixed(0)} CPU-s)` +
    ` · trainer ${n('trainer_cpu_s').toFixed(0)} CPU-s, ${n('trainer_gpu_s').toFixed(0)} GPU-s · tokens ${n('tokens_generated')} generated, ${n('tokens_trained')} trained` +
    ` · Temporal events: ${n('temporal_events')} TrainRun, ${n('temporal_child_events')} rollout children`;
}

/**
 * The workflow's own line for its last finished step, once per step, when no step record is readable from
 * here (the run's store is another machine's, or needs credentials this shell lacks); `shown` remembers it.
 */
export function summaryLineOnce(last: Progress['lastStep'], recordsRead: boolean, shown: Set<number>): string | undefined {
  if (!last || recordsRead || shown.has(last.step)) return undefined;
  shown.add(last.step);
  return `${c.bold(`step ${String(last.step).padStart(4)}`)}  v${last.policyVersion} reward ${c.cyan(fmtReward(last.meanReward))}  ${last.rollouts} rollouts`;
}

export interface FollowResult {
  status: string;
  description: WorkflowExecutionDescription;
}

/**
 * Prints finished steps as they land and a live bar for the current step's
 * rollouts, until the workflow closes (or once, with `once`).
 */
export async function followRun(client: Client, workflowId: string, opts: { once?: boolean; pollMs?: number } = {}): Promise<FollowResult> {
  const handle = client.workflow.getHandle(workflowId);
  const printed = new Set<number>();
  const summarized = new Set<number>();
  const printedControls = new Set<string>();
  const showControls = (actions: ControlAction[] | undefined) => {
    for (const a of actions ?? []) {
      if (printedControls.has(controlKey(a))) continue;
      printedControls.add(controlKey(a));
      bar.clear();
      console.log(controlLine(a));
    }
  };
  const bar = new ProgressBar();
  let lastPhaseKey = '';
  let lastEvalKey = '';
  let interrupted = false;
  const onSigint = () => { interrupted = true; };
  process.once('SIGINT', onSigint);
  try {
    for (;;) {
      let desc: WorkflowExecutionDescription;
      try {
        desc = await handle.describe();
      } catch (err) {
        notFound(err, `run "${workflowId}"`);
      }
      for (const r of await recordsSoft(workflowId)) {
        if (printed.has(r.step)) continue;
        bar.clear();
        console.log(stepLine(r));
        showControls(r.control);
        if (r.eval_sweep) console.log(evalSweepLine(r.eval_sweep));
        printed.add(r.step);
      }
      const status = desc.status.name;
      if (status !== 'RUNNING') {
        bar.clear();
        const latest = await latestEvalSoft(workflowId);
        if (latest) console.log(latest);
        return { status, description: desc };
      }
      const p = await queryProgress(client, workflowId);
      if (p) {
        showControls(p.controls);
        const evalKey = p.lastEval ? `${p.lastEval.workflow_id}:${p.lastEval.state}` : '';
        if (p.lastEval && evalKey !== lastEvalKey && !opts.once) {
          bar.clear();
          console.log(lastEvalLine(p.lastEval));
        }
        lastEvalKey = evalKey;
        const summary = summaryLineOnce(p.lastStep, printed.size > 0, summarized);
        if (summary) {
          bar.clear();
          console.log(summary);
        }
        const beat = p.phase === 'training' || p.phase === 'saving' ? trainerBeat(desc) : undefined;
        // What the run waits for, when the local stack's supervisor is bringing a service back (issue 42).
        const back = restartingNote(readRestarting());
        const line = `${phaseLine(p, beat)}${back ? ` · ${back}` : ''}`;
        // A line per phase (and per micro-batch): the log of a step as it happens, also in a non-TTY log.
        const key = `${p.step}:${p.phase}:${beat?.microBatch ?? ''}:${beat?.attempt ?? ''}:${p.status}:${back.replace(/\d+ s ago/g, '')}`;
        if (key !== lastPhaseKey && !opts.once) {
          bar.clear();
          console.log(c.dim(`  ${line}`));
          lastPhaseKey = key;
        }
        if (p.phase === 'training' && beat?.microBatches) bar.update(beat.microBatch ?? 0, beat.microBatches, line);
        else bar.update(p.rolloutsDone, p.rolloutsTotal, line);
      }
      if (opts.once) {
        bar.clear();
        if (p) console.log(`${c.bold(desc.workflowId)} ${c.green(p.status)}: ${phaseLine(p, p.phase === 'training' || p.phase === 'saving' ? trainerBeat(desc) : undefined)}, policy v${p.policyVersion}`);
        const back = restartingNote(readRestarting());
        if (back) console.log(c.yellow(`  ${back}`));
        if (p?.cost) console.log(c.dim(`  ${costLine(p.cost)}`));
        else console.log(`${c.bold(desc.workflowId)} running (no worker answered the progress query: is \`ratchet up\` running the workers?)`);
        if (p?.lastEval) console.log(lastEvalLine(p.lastEval));
        const latest = await latestEvalSoft(workflowId);
        if (latest) console.log(latest);
        return { status, description: desc };
      }
      if (interrupted) {
        bar.clear();
        throw new CliError('interrupted; the run keeps going (follow it again with `ratchet status ' + workflowId + '`)', EXIT.interrupted);
      }
      await new Promise((r) => setTimeout(r, opts.pollMs ?? 1_000));
    }
  } finally {
    process.removeListener('SIGINT', onSigint);
  }
}
