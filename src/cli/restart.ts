/**
 * `ratchet restart <run>`: a run that failed, was terminated, cancelled or timed
 * out starts again under the same run id, from its last completed step (the
 * run-state file; TrainRun's openRun reads it). The trainer reloads that step's
 * checkpoint, so no step is applied twice, and the step that was in flight is
 * redone from its rollouts (docs/contracts.md: checkpoints keyed by batch). It reads the run's status
 * first: a running or completed run is refused before its store is read, so nothing is written into it.
 */
import { WorkflowExecutionAlreadyStartedError, WorkflowIdReusePolicy } from '@temporalio/client';
import type { Command } from 'commander';
import type { StoreSettings } from '../artifacts/settings';
import { DiskFullError, StoreUnavailableError } from '../artifacts/errors';
import { type ArtifactStore, uriToPath } from '../artifacts/store';
import { runKeys } from '../artifacts/keys';
import { defaultStore, storeFor } from '../artifacts/stores';
import { TASK_QUEUES } from '../shared/paths';
import { type FallbackRecord, pickResume, type RunStateFile, type TrainRunInput } from '../contracts';
import { checkpointProblem, commitFallback, planFallback } from '../records/fallback';
import { readRunState as readRecordedState } from '../records/runRecords';
import { CliError, EXIT } from './exit';
import { followRun } from './follow';
import { runArtifacts } from './runStore';
import { connectClient, describeRun, workflowUiUrl } from './temporal';
import { c } from './term';

const RESTARTABLE = ['FAILED', 'TERMINATED', 'CANCELLED', 'TIMED_OUT'];

/**
 * Refuses a run in `status` that may not restart (running, completed): checked before anything reads or
 * writes the run's store, so a mistaken restart never writes into a live or finished run.
 */
export function checkRestartable(run: string, status: string): void {
  if (status === 'RUNNING' || status === 'CONTINUED_AS_NEW') {
    throw new CliError(`run "${run}" is running; nothing to restart, nothing written. Follow it: ratchet status ${run}`, EXIT.failure);
  }
  if (!RESTARTABLE.includes(status)) {
    throw new CliError(`run "${run}" is ${status.toLowerCase()}, not failed or terminated; nothing to restart, nothing written. ` +
      `To train further, start a new run: ratchet train <config>`, EXIT.failure);
  }
}

/**
 * Whether a run in `status` may restart, and from where; a CliError that says what to do otherwise.
 * `artifacts`: the run's own store when it is not the default one (its memo or --config names it).
 */
export function restartPlan(run: string, status: string, state: RunStateFile | undefined, configPath: string | undefined,
  artifacts?: StoreSettings): { input: TrainRunInput; from: string } {
  checkRestartable(run, status);
  if (state) {
    const from = `step ${state.nextStep} (policy v${state.policyVersion})`;
    if (artifacts) {
      // A run in a store of its own (s3://...): openRun would look for the state in the default store,
      // so the run resumes from this state directly and reads its stored config from its store.
      return { input: { configPath: configPath ?? state.configRef.uri, runId: run, resume: pickResume({ ...state, artifacts: state.artifacts ?? artifacts }) }, from };
    }
    // openRun resumes from the state file and its stored config; the path is only a record of where it came from.
    return { input: { configPath: uriToPath(state.configRef.uri), runId: run }, from };
  }
  if (!configPath) {
    throw new CliError(`run "${run}" never completed a step (no ${runKeys.state(run)}), so there is nothing to resume from. ` +
      `Fix: ratchet restart ${run} --config <its config>, which starts it again from step 0`, EXIT.notReady);
  }
  return { input: { configPath, runId: run }, from: 'step 0' };
}

/** The run's state file, read from the run's own store; undefined for a run that never completed a step. */
export async function readRunState(run: string, store: ArtifactStore): Promise<RunStateFile | undefined> {
  return readRecordedState(store, run);
}

/** How long `ratchet restart` waits for a store it cannot read (or a full disk) before it gives up, writing nothing. */
export const RESTART_STORE_WAIT_S = 120;

/**
 * The state to restart from: `state` when its checkpoint and adapter verify; else the run falls back to
 * the newest checkpoint that does (src/records/fallback.ts), recorded in the run's store before it starts,
 * so the steps after it are retrained once each. Returns the state and, on a fallback, its record.
 * Only proven corruption falls back: while the store cannot be read (StoreUnavailable, a refusal, a full
 * disk, EMFILE) it tries again, pausing 2 s doubling to 30 s, for `waitS` seconds, then gives up with
 * nothing written.
 */
export async function verifiedRestartState(store: ArtifactStore, state: RunStateFile, now = new Date(),
  opts: { waitS?: number; onWait?: (reason: string, error: string, pauseS: number) => void; sleep?: (ms: number) => Promise<void> } = {}): Promise<{ state: RunStateFile; fallback?: FallbackRecord }> {
  const sleep = opts.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const deadline = Date.now() + (opts.waitS ?? RESTART_STORE_WAIT_S) * 1000;
  for (let pause = 2; ; pause = Math.min(pause * 2, 30)) {
    try {
      const problem = await checkpointProblem(store, state);
      if (problem === undefined) return { state };
      const plan = await planFallback(store, state, problem, 'restart', now.toISOString());
      await commitFallback(store, plan);
      return { state: plan.state, fallback: plan.record };
    } catch (err) {
      const reason = err instanceof StoreUnavailableError ? 'waiting-for-store' : err instanceof DiskFullError ? 'waiting-for-disk' : undefined;
      if (!reason) throw err;
      if (Date.now() + pause * 1000 > deadline) {
        throw new CliError(`could not verify the checkpoints of run "${state.runId}" in ${store.url}: ${(err as Error).message}\n` +
          `This is not corruption: nothing was written and the run was not restarted. Fix: when the store answers again (or the disk has space), rerun ratchet restart ${state.runId}` +
          ` (--store-wait <seconds> waits longer)`, EXIT.notReady);
      }
      opts.onWait?.(reason, (err as Error).message, pause);
      await sleep(pause * 1000);
    }
  }
}

export function register(program: Command): void {
  program.command('restart')
    .description('restart a failed or terminated run from its last completed step (same run id)')
    .argument('<run>', 'run id')
    .option('--config <path>', 'run config, needed only for a run that never completed a step')
    .option('--wait', 'follow the restarted run')
    .option('--store-wait <seconds>', 'how long to wait for a store that cannot be read (or a full disk) while verifying checkpoints', String(RESTART_STORE_WAIT_S))
    .addHelpText('after', '\nExamples:\n  $ ratchet restart smoke-1\n  $ ratchet restart smoke-1 --wait')
    .action(async (run: string, opts: { config?: string; wait?: boolean; storeWait: string }, cmd: Command) => {
      const waitS = Number(opts.storeWait);
      if (!Number.isFinite(waitS) || waitS < 0) throw new CliError(`--store-wait: "${opts.storeWait}" is not a number of seconds >= 0. Fix: --store-wait 300`, EXIT.usage);
      const { client, close } = await connectClient(cmd.optsWithGlobals());
      try {
        const desc = await describeRun(client, run);
        const status = desc.status.name;
        // An SftRun restarts as an SftRun: the same state file, the same frozen data.
        const workflowType = desc.type === 'SftRun' ? 'SftRun' : 'TrainRun';
        // Before the store is read or written: a running or completed run is left as it is.
        checkRestartable(run, status);
        // The run's own store: --config's [artifacts], else the settings the run recorded in its memo, else the default.
        const artifacts = await runArtifacts(run, { config: opts.config, client: async () => client });
        const runStore = storeFor(artifacts, defaultStore());
        const recorded = await readRunState(run, runStore);
        const checked = recorded && await verifiedRestartState(runStore, recorded, new Date(), {
          waitS,
          onWait: (reason, error, pauseS) => console.log(`${c.yellow(reason)}: ${error}; trying again in ${pauseS} s`),
        });
        if (checked?.fallback) {
          const f = checked.fallback;
          console.log(`${c.yellow('checkpoint fallback')}: the checkpoint of step ${f.bad.step} does not verify (${f.bad.error}); ` +
            `restarting from ${f.used ? `step ${f.used.step}'s checkpoint` : 'the base model'}, steps ${f.retrained_steps.join(', ')} are trained again (recorded in ${runKeys.records(run)}/fallbacks)`);
        }
        const { input, from } = restartPlan(run, status, checked?.state, opts.config, artifacts);
        let handle;
        try {
          handle = await client.workflow.start(workflowType, {
            taskQueue: TASK_QUEUES.main, workflowId: run, args: [input],
            workflowIdReusePolicy: WorkflowIdReusePolicy.ALLOW_DUPLICATE,
          });
        } catch (err) {
          if (err instanceof WorkflowExecutionAlreadyStartedError) throw new CliError(`run "${run}" was started meanwhile; follow it: ratchet status ${run}`, EXIT.failure);
          throw err;
        }
        console.log(`${c.green('restarted')} ${c.bold(run)} from ${from}  ${workflowUiUrl(run, handle.firstExecutionRunId)}`);
        if (!opts.wait) return;
        const res = await followRun(client, run);
        console.log(`${c.bold(run)} ${res.status.toLowerCase()}`);
        if (res.status !== 'COMPLETED') process.exitCode = EXIT.failure;
      } finally {
        await close();
      }
    });
}
