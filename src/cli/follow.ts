import type { Client, WorkflowExecutionDescription } from '@temporalio/client';
import { loadStepRecords } from '../report/load';
import type { StepRecord } from '../report/records';
import { progressQuery } from '../workflows/messages';
import type { Progress } from '../workflows/types';
import { CliError, EXIT } from './exit';
import { notFound } from './temporal';
import { c, fmtMs, fmtReward, ProgressBar } from './term';

/** One line per finished step: what people scan in a terminal. */
export function stepLine(r: StepRecord): string {
  const comps = Object.entries(r.components).map(([k, v]) => `${k} ${v.toFixed(2)}`).join(' · ');
  const wall = Date.parse(r.finished_at) - Date.parse(r.started_at);
  return `${c.bold(`step ${String(r.step).padStart(4)}`)}  v${String(r.policy_version).padEnd(3)} reward ${c.cyan(fmtReward(r.reward.mean))} ±${r.reward.std.toFixed(3)}` +
    `  ${c.dim(comps ? `[${comps}]` : '')}  ${r.episodes ?? r.rollouts} eps  ${fmtMs(wall)}`;
}

async function recordsSoft(runId: string): Promise<StepRecord[]> {
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
  const bar = new ProgressBar();
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
        printed.add(r.step);
      }
      const status = desc.status.name;
      if (status !== 'RUNNING') {
        bar.clear();
        return { status, description: desc };
      }
      const p = await queryProgress(client, workflowId);
      if (p) {
        if (p.lastStep && !printed.has(p.lastStep.step) && printed.size === 0) {
          // No metrics file readable from here (another machine's store): the workflow's own summary.
          bar.clear();
          console.log(`${c.bold(`step ${String(p.lastStep.step).padStart(4)}`)}  v${p.lastStep.policyVersion} reward ${c.cyan(fmtReward(p.lastStep.meanReward))}  ${p.lastStep.rollouts} rollouts`);
        }
        bar.update(p.rolloutsDone, p.rolloutsTotal, `step ${p.step}/${p.maxSteps} · ${p.phase} · ${p.status}`);
      }
      if (opts.once) {
        bar.clear();
        if (p) console.log(`${c.bold(desc.workflowId)} ${c.green(p.status)}: step ${p.step}/${p.maxSteps}, ${p.phase}, rollouts ${p.rolloutsDone}/${p.rolloutsTotal}, policy v${p.policyVersion}`);
        else console.log(`${c.bold(desc.workflowId)} running (no worker answered the progress query: is \`ratchet up\` running the workers?)`);
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
