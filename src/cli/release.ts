/**
 * `ratchet release <run> --reason "..."`: a run that ended without releasing what it held (terminated:
 * no workflow code ran at its end) gives back its trainer (lease and model) and its adapters in inference,
 * by hand. The trainer frees such a lease by itself when another run announces (issue 42), and that run
 * unloads the adapters; this is for when no other run comes, or for an operator who wants it now.
 * Runs the ReleaseRun workflow (its history records who and why) and writes a release record into the
 * run's store (records/releases/, docs/operations.md).
 */
import type { Client } from '@temporalio/client';
import type { temporal } from '@temporalio/proto';
import type { Command } from 'commander';
import { runKeys } from '../artifacts/keys';
import { RunConfig } from '../config/schema';
import type { ReleaseRunInput, ReleaseRunResult } from '../contracts/run';
import { DEFAULTS, TASK_QUEUES } from '../shared/paths';
import { controlRequest } from './control';
import { CliError, EXIT } from './exit';
import { runStore } from './runStore';
import { connectClient, describeRun } from './temporal';
import { c } from './term';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

/** How many executions back (continue-as-new) to look for the trainer the run called last. */
const MAX_EXECUTIONS_BACK = 20;

/**
 * The trainer queue a run called last in one execution's history: the newest trainer activity scheduled
 * on a trainer's own queue (not the shared announce queue). Undefined when this execution called none
 * (it may hold the one carried across continue-as-new): the caller looks one execution back.
 */
export function lastTrainerQueue(events: HistoryEvent[]): string | undefined {
  for (let i = events.length - 1; i >= 0; i--) {
    const a = events[i]!.activityTaskScheduledEventAttributes;
    const queue = a?.taskQueue?.name;
    if (a?.activityType?.name?.startsWith('trainer.') && queue && queue !== TASK_QUEUES.trainerAnnounce) return queue;
  }
  return undefined;
}

/** The trainer queue of the run's newest execution that called one, following continue-as-new backwards. */
async function trainerQueueOf(client: Client, run: string): Promise<string | undefined> {
  let runId: string | undefined;
  for (let i = 0; i < MAX_EXECUTIONS_BACK; i++) {
    const history = await client.workflow.getHandle(run, runId).fetchHistory();
    const events = history.events ?? [];
    const queue = lastTrainerQueue(events);
    if (queue) return queue;
    runId = events[0]?.workflowExecutionStartedEventAttributes?.continuedExecutionRunId ?? undefined;
    if (!runId) return undefined;
  }
  return undefined;
}

/** The replicas to unload from: --inference, else the run's stored config, else the local stack's. */
async function baseUrlsOf(client: Client, run: string, inference: string | undefined): Promise<{ urls: string[]; from: string }> {
  if (inference) {
    const urls = inference.split(',').map((u) => u.trim()).filter(Boolean);
    if (!urls.length || urls.some((u) => !/^https?:\/\//.test(u))) {
      throw new CliError(`--inference "${inference}": not a comma-separated list of http(s) URLs. Fix: e.g. --inference http://127.0.0.1:8000/v1`, EXIT.usage);
    }
    return { urls, from: '--inference' };
  }
  const store = await runStore(run, { client: async () => client });
  const text = await store.read(runKeys.config(run)).catch(() => undefined);
  if (text) {
    const parsed = RunConfig.safeParse(JSON.parse(text.toString('utf8')));
    if (parsed.success) return { urls: parsed.data.inference.base_urls, from: `the run's stored config (${runKeys.config(run)})` };
  }
  return { urls: [DEFAULTS.inferenceUrl], from: 'the local stack (no stored config found; pass --inference to name others)' };
}

export function register(program: Command): void {
  program.command('release')
    .description('give back what an ended (terminated) run still holds: its trainer\'s lease and model, its adapters in inference')
    .argument('<run>', 'run id')
    .option('--reason <text>', 'why: recorded with your identity ($USER@host) and the time, in the run\'s records/releases/')
    .option('--inference <urls>', 'comma-separated inference base URLs to unload from (default: the run\'s config)')
    .addHelpText('after', '\nExamples:\n  $ ratchet release smoke-1 --reason "terminated by hand; free the trainer for smoke-2"')
    .action(async (run: string, opts: { reason?: string; inference?: string }, cmd: Command) => {
      const { client, close } = await connectClient(cmd.optsWithGlobals());
      try {
        const status = (await describeRun(client, run)).status.name;
        if (status === 'RUNNING') {
          throw new CliError(`run "${run}" is running: it holds its trainer and adapters until it ends, and releases them then. ` +
            `Fix: ratchet stop ${run} --reason "..." (or terminate it first, then release)`, EXIT.notReady);
        }
        const trainerQueue = await trainerQueueOf(client, run);
        const { urls, from } = await baseUrlsOf(client, run, opts.inference);
        const request = controlRequest(opts.reason);
        const input: ReleaseRunInput = { runId: run, baseUrls: urls, ...request, ...(trainerQueue ? { trainerQueue } : {}) };
        const time = new Date().toISOString();
        const result: ReleaseRunResult = await client.workflow.execute('ReleaseRun', {
          taskQueue: TASK_QUEUES.main, workflowId: `${run}-release-${Date.now()}`, args: [input],
        });
        const store = await runStore(run, { client: async () => client });
        const key = runKeys.releaseRecord(run, time);
        await store.putJson(key, { action: 'release', run_id: run, time, identity: request.identity, reason: request.reason ?? null, status, base_urls_from: from, ...result });
        const t = result.trainer;
        const trainerLine = t.state === 'released' ? c.green(`released (worker ${t.worker_id})`)
          : t.state === 'not-held' ? `already free of ${run} (worker ${t.worker_id}: another run has it, or none)`
            : t.state === 'gone' ? `no trainer polls ${t.queue} any more (nothing held)`
              : 'the run never called a trainer';
        console.log(`${c.bold(run)} (${status.toLowerCase()}): trainer ${trainerLine}; adapters unloaded: ${result.adapters.unloaded.length}` +
          (result.adapters.down.length ? c.yellow(`; replicas down (serve nothing after their restart): ${result.adapters.down.join('; ')}`) : ''));
        console.log(c.dim(`inference from ${from}; recorded in ${key}`));
      } finally {
        await close();
      }
    });
}
