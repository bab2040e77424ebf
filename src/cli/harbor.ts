import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { Command } from 'commander';
import { HarborTaskError, loadHarborTasks } from '../tasks/harbor';
import { CliError, EXIT } from './exit';
import { c } from './term';

export function register(program: Command): void {
  program.command('harbor')
    .description('load a Harbor task dir or dataset as a Ratchet task file (builds each environment image offline)')
    .argument('<dir>', 'a Harbor task dir (task.toml, instruction.md, environment/Dockerfile, tests/test.sh) or a dataset dir of them')
    .requiredOption('-o, --out <file>', 'the JSONL task file to write; name it as [[env]].dataset with id = "harbor" (or a harness env)')
    .addHelpText('after', '\nExamples:\n  $ ratchet harbor ./my-tasks --out .ratchet/tasks/harbor.jsonl')
    .action(async (dir: string, opts: { out: string }) => {
      try {
        const tasks = await loadHarborTasks(dir);
        await fs.mkdir(path.dirname(path.resolve(opts.out)), { recursive: true });
        const tmp = `${opts.out}.tmp-${process.pid}`;
        await fs.writeFile(tmp, tasks.map((t) => JSON.stringify(t)).join('\n') + '\n');
        await fs.rename(tmp, opts.out);
        for (const t of tasks) console.log(`${c.green('task')} ${t.instance_id} ${c.dim(t.source?.type === 'image' ? t.source.image : '')}`);
        console.log(`${c.green('wrote')} ${opts.out} (${tasks.length} task${tasks.length === 1 ? '' : 's'})`);
      } catch (err) {
        if (err instanceof HarborTaskError) throw new CliError(err.message, EXIT.invalidInput);
        throw err;
      }
    });
}
