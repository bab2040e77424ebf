/**
 * `ratchet demos`: SFT demonstrations from the scripted solvers (src/sft/demos.ts), each a real
 * episode on a real sandbox, kept when it reaches --min-reward; written as a JSONL file of
 * ratchet.trajectory/v1 objects for an [sft] data file.
 */
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { Command } from 'commander';
import pino from 'pino';
import { SandboxManager } from '../sandbox/manager';
import { makeDemonstrations, SOLVERS } from '../sft/demos';
import { loadTasks } from '../tasks/load';
import { CliError, EXIT } from './exit';
import { c } from './term';

interface DemoFlags { tasks: string; out: string; env: string; limit?: string; minReward: string; concurrency: string }

const positive = (flag: string, value: string, integer: boolean): number => {
  const n = Number(value);
  if (!Number.isFinite(n) || (integer && (!Number.isInteger(n) || n < 1))) {
    throw new CliError(`${flag} must be ${integer ? 'an integer >= 1' : 'a number'}, got "${value}"`, EXIT.usage);
  }
  return n;
};

export function register(program: Command): void {
  program.command('demos')
    .description('run the scripted solver of an environment on its tasks and keep the episodes that reach a reward, as SFT data')
    .option('--tasks <file>', 'the task file (JSONL)', '.ratchet/tasks/train.jsonl')
    .option('-o, --out <file>', 'the JSONL file of trajectories to write', 'demos.jsonl')
    .option('--env <id>', `the environment: ${Object.keys(SOLVERS).join(', ')}`, 'swe-grep')
    .option('--limit <n>', 'at most this many tasks, from the top of the file')
    .option('--min-reward <r>', 'keep an episode whose reward reaches this', '1')
    .option('--concurrency <n>', 'episodes at once', '2')
    .addHelpText('after', '\nExamples:\n  $ ratchet demos --tasks .ratchet/tasks/train.jsonl --out .ratchet/sft/swe-grep-demos.jsonl --limit 64\n' +
      '  $ ratchet demos --env debug --out .ratchet/sft/debug-demos.jsonl')
    .action(async (o: DemoFlags) => {
      if (!SOLVERS[o.env]) throw new CliError(`--env: no scripted solver for "${o.env}". Fix: one of ${Object.keys(SOLVERS).join(', ')}`, EXIT.usage);
      const limit = o.limit === undefined ? Infinity : positive('--limit', o.limit, true);
      const minReward = positive('--min-reward', o.minReward, false);
      const concurrency = positive('--concurrency', o.concurrency, true);
      const tasks = (await loadTasks(o.tasks, { onInvalid: 'skip' }).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
        throw new CliError(`--tasks: ${o.tasks} does not exist. Fix: name a task file (bash infra/setup.sh makes .ratchet/tasks/train.jsonl)`, EXIT.invalidInput);
      })).tasks.slice(0, limit);
      const sandboxes = new SandboxManager({ log: pino({ level: 'warn' }) });
      try {
        const { kept, all, skipped } = await makeDemonstrations({ envId: o.env, tasks, taskSetDir: path.dirname(o.tasks), sandboxes, minReward, concurrency });
        await fs.mkdir(path.dirname(path.resolve(o.out)), { recursive: true });
        await fs.writeFile(o.out, kept.map((t) => JSON.stringify(t)).join('\n') + (kept.length ? '\n' : ''));
        const rewards = all.map((t) => t.reward?.total ?? 0);
        const mean = rewards.reduce((a, b) => a + b, 0) / Math.max(1, rewards.length);
        console.log(`${c.green('wrote')} ${o.out}: ${kept.length} of ${all.length} demonstrations reached reward ${minReward} ${c.dim(`(mean reward ${mean.toFixed(3)})`)}`);
        if (skipped.length) {
          console.log(`${c.yellow('skipped')} ${skipped.length} task(s): the solver cannot replay their gold patch (first: ${skipped[0]!.instance_id}: ${skipped[0]!.reason})`);
        }
      } finally {
        await sandboxes.close();
      }
    });
}
