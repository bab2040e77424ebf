import { ScheduleAlreadyRunning, ScheduleNotFoundError, ScheduleOverlapPolicy, type Client } from '@temporalio/client';
import type { Command } from 'commander';
import { TASK_QUEUES } from '../shared/paths';
import { addEvalFlags } from './eval';
import { evalInputFromFlags, type EvalFlags } from './evalInput';
import { CliError, EXIT } from './exit';
import { connectClient } from './temporal';
import { c, parseDuration } from './term';

type G = { address?: string; namespace?: string };

async function withClient<T>(cmd: Command, fn: (client: Client) => Promise<T>): Promise<T> {
  const { client, close } = await connectClient(cmd.optsWithGlobals<G>());
  try {
    return await fn(client);
  } catch (err) {
    if (err instanceof ScheduleNotFoundError) throw new CliError(`${err.message}. Fix: list schedules with \`ratchet schedule list\`.`, EXIT.notFound);
    throw err;
  } finally {
    await close();
  }
}

export function scheduleIdFor(run: string, taskset: string): string {
  return `eval-${run}-${taskset.replace(/[^A-Za-z0-9._-]+/g, '_').replace(/^_+/, '')}`;
}

export function register(program: Command): void {
  const schedule = program.command('schedule')
    .description('Temporal Schedules that run EvalSweep periodically (also visible in the Web UI and `temporal schedule`)')
    .addHelpText('after', '\nExamples:\n  $ ratchet schedule eval --run smoke-1 --every 30m --newest 1 --taskset heldout --k 4\n' +
      '  $ ratchet schedule list\n  $ ratchet schedule trigger eval-smoke-1-heldout\n  $ ratchet schedule pause eval-smoke-1-heldout\n  $ ratchet schedule delete eval-smoke-1-heldout');

  addEvalFlags(schedule.command('eval')
    .description('create a schedule that evaluates a run every interval'))
    .requiredOption('--every <duration>', 'interval: 30s, 30m, 2h, 1d')
    .option('--id <scheduleId>', 'schedule id (default: eval-<run>-<taskset>)')
    .addHelpText('after', '\nExit codes: 3 when the run does not exist, 5 when the task set fails validation.\n\nExamples:\n' +
      '  $ ratchet schedule eval --run smoke-1 --every 30m\n  $ ratchet schedule eval --run smoke-1 --every 2h --versions 0 --taskset heldout --k 8')
    .action(async (flags: EvalFlags & { every: string; id?: string }, cmd: Command) => {
      const everyMs = parseDuration(flags.every);
      if (!everyMs || everyMs < 1000) throw new CliError(`--every "${flags.every}" is not a duration of at least 1s; use e.g. 30s, 30m, 2h`, EXIT.usage);
      await withClient(cmd, async (client) => {
        const input = await evalInputFromFlags(client, flags);
        const scheduleId = flags.id ?? scheduleIdFor(flags.run, flags.taskset);
        try {
          await client.schedule.create({
            scheduleId,
            spec: { intervals: [{ every: everyMs }] },
            action: { type: 'startWorkflow', workflowType: 'EvalSweep', taskQueue: TASK_QUEUES.main, workflowId: `${scheduleId}`, args: [input] },
            policies: {
              // SKIP: a sweep still running when the next tick comes means evals are slower than the
              // interval; queueing more would only pile up work on the same (shared) rollout workers,
              // and the next tick evaluates the newest version anyway. Already-evaluated versions are
              // skipped inside the sweep, so a skipped tick loses nothing.
              overlap: ScheduleOverlapPolicy.SKIP,
              // A tick missed while Temporal was down is worth one catch-up run, not a burst.
              catchupWindow: '1 minute',
              pauseOnFailure: false,
            },
            memo: { runId: flags.run, taskset: flags.taskset },
          });
        } catch (err) {
          if (err instanceof ScheduleAlreadyRunning) throw new CliError(`schedule "${scheduleId}" already exists. Fix: \`ratchet schedule delete ${scheduleId}\` first, or pass --id`, EXIT.failure);
          throw err;
        }
        console.log(`${c.green('created')} schedule ${c.bold(scheduleId)}: EvalSweep of ${flags.run} every ${flags.every} (overlap: skip)`);
        console.log(c.dim(`manage: ratchet schedule trigger|pause|unpause|delete ${scheduleId}  ·  temporal schedule describe --schedule-id ${scheduleId}`));
      });
    });

  schedule.command('list')
    .description('list schedules with their state and next run')
    .action(async (_o, cmd: Command) => withClient(cmd, async (client) => {
      let n = 0;
      for await (const s of client.schedule.list()) {
        if (n++ === 0) console.log(c.dim(`${'schedule'.padEnd(36)} ${'state'.padEnd(8)} ${'workflow'.padEnd(12)} next run`));
        const wfType = s.action?.type === 'startWorkflow' ? s.action.workflowType : '—';
        const next = s.info.nextActionTimes[0]?.toISOString() ?? '—';
        console.log(`${s.scheduleId.padEnd(36)} ${(s.state.paused ? c.yellow('paused') : c.green('active')).padEnd(8)} ${wfType.padEnd(12)} ${next}`);
      }
      if (n === 0) console.log('no schedules. Create one: ratchet schedule eval --run <id> --every 30m');
    }));

  const simple = (name: string, description: string, fn: (client: Client, id: string) => Promise<string>) =>
    schedule.command(name).description(description).argument('<id>', 'schedule id (see `ratchet schedule list`)')
      .action(async (id: string, _o, cmd: Command) => withClient(cmd, async (client) => { console.log(await fn(client, id)); }));

  simple('pause', 'pause a schedule (no new sweeps until unpaused)', async (client, id) => {
    await client.schedule.getHandle(id).pause('paused with ratchet schedule pause');
    return `${id}: ${c.yellow('paused')}`;
  });
  simple('unpause', 'unpause a schedule', async (client, id) => {
    await client.schedule.getHandle(id).unpause('unpaused with ratchet schedule unpause');
    return `${id}: ${c.green('active')}`;
  });
  simple('trigger', 'start a sweep now (the overlap policy still applies)', async (client, id) => {
    await client.schedule.getHandle(id).trigger(ScheduleOverlapPolicy.SKIP);
    return `${id}: triggered`;
  });
  simple('delete', 'delete a schedule (running sweeps finish; results stay)', async (client, id) => {
    await client.schedule.getHandle(id).delete();
    return `${id}: ${c.red('deleted')}`;
  });
  simple('describe', 'show a schedule: spec, state, recent runs', async (client, id) => {
    const d = await client.schedule.getHandle(id).describe();
    const recent = d.info.recentActions.slice(-5).map((a) => `  ${a.takenAt.toISOString()} ${a.action.workflow.workflowId}`).join('\n');
    return `${id}: ${d.state.paused ? 'paused' : 'active'}, next ${d.info.nextActionTimes[0]?.toISOString() ?? '—'}, ` +
      `${d.info.numActionsTaken} runs, ${d.info.numActionsSkippedOverlap} skipped for overlap\n${recent}`;
  });
}
