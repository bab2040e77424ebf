import type { Command } from 'commander';
import type { EvalSweepResult } from '../contracts/eval';
import { TASK_QUEUES } from '../shared/paths';
import { evalInputFromFlags, type EvalFlags } from './evalInput';
import { EXIT } from './exit';
import { connectClient, workflowUiUrl } from './temporal';
import { c } from './term';
import { evalPriority } from '../shared/fairness';

const pct = (x: number | null): string => (x === null ? '—' : `${(x * 100).toFixed(1)}%`);

export function addEvalFlags(cmd: Command): Command {
  return cmd
    .requiredOption('--run <id>', 'the run whose policy versions to evaluate')
    .option('--versions <list>', 'explicit policy versions, comma separated (e.g. 0,4,8)')
    .option('--newest <n>', 'the newest N policy versions of the run (default 1)')
    .option('--taskset <name|path>', 'task set name under .ratchet/tasks or a JSONL path', 'heldout')
    .option('--k <n>', 'samples per task (pass@k)', '4')
    .option('--force', 're-evaluate versions already evaluated on this task set')
    .option('--concurrency <n>', 'rollouts in flight at once')
    .option('--config <file>', "the run's config file: the sweep reads the run and writes results in its [artifacts] store");
}

export function register(program: Command): void {
  addEvalFlags(program.command('eval')
    .description('run an EvalSweep now: policy versions × a held-out task set × k samples'))
    .option('--no-wait', 'start the sweep and return')
    .addHelpText('after', '\nExamples:\n  $ ratchet eval --run smoke-1 --newest 1\n  $ ratchet eval --run smoke-1 --versions 0,3 --taskset heldout --k 4\n' +
      '  $ ratchet eval --run smoke-1 --taskset /data/swe-lite.jsonl --k 1 --no-wait')
    .action(async (flags: EvalFlags & { wait: boolean }, cmd: Command) => {
      const { client, close } = await connectClient(cmd.optsWithGlobals());
      try {
        const input = await evalInputFromFlags(client, flags);
        const workflowId = `eval-${flags.run}-${Date.now().toString(36)}`;
        const handle = await client.workflow.start('EvalSweep', { taskQueue: TASK_QUEUES.main, workflowId, args: [input], priority: evalPriority(input.runId) });
        console.log(`${c.green('started')} ${workflowId}  ${workflowUiUrl(workflowId, handle.firstExecutionRunId)}`);
        if (!flags.wait) return;
        let res: EvalSweepResult;
        try {
          res = await handle.result() as EvalSweepResult;
        } catch (err) {
          console.error(c.err.red(`eval sweep failed: ${((err as Error).cause as Error | undefined)?.message ?? (err as Error).message}`));
          process.exitCode = EXIT.failure;
          return;
        }
        console.log(`${res.taskset.name} (${res.taskset.tasks} tasks, hash ${res.taskset.hash}), k=${res.k}`);
        if (res.skipped.length) console.log(c.dim(`skipped (already evaluated; --force to redo): v${res.skipped.join(', v')}`));
        for (const s of res.evaluated) {
          console.log(`  v${String(s.version).padEnd(4)} pass@1 ${pct(s.passAt1).padStart(6)}  pass@${res.k} ${pct(s.passAtK).padStart(6)}  reward ${s.meanReward.toFixed(3)}` +
            `  file F1 ${pct(s.fileF1)}  fn F1 ${pct(s.functionF1)}  ${s.episodes} eps${s.errors ? c.red(` ${s.errors} errors`) : ''}`);
        }
        console.log(c.dim(`results: ${res.evaluated.map((s) => s.key).join(', ') || 'none new'} · plot them: ratchet report ${flags.run}`));
      } finally {
        await close();
      }
    });
}
