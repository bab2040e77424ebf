import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import type { Command } from 'commander';
import { TASK_QUEUES } from '../shared/paths';
import type { TrainRunInput } from '../contracts';
import { ConfigError, loadRunConfig } from '../config/load';
import { checkOrThrow } from './check';
import { CliError, EXIT } from './exit';
import { followRun } from './follow';
import { connectClient, workflowUiUrl } from './temporal';
import { c } from './term';
import { trainingPriority } from '../shared/fairness';
import { storeSettings } from '../config/storeSettings';
import { defaultStore, storeFor } from '../artifacts/stores';
import type { RunConfig } from '../config/schema';
import { InitFromError, parseInitFrom, resolveInitFrom } from '../records/initFrom';
import { resolveConfigPath } from '../shared/paths';

/**
 * [model] init_from (or --init-from) resolved and verified here, before the run starts, where this
 * host reaches the run's store: a missing run or step, a corrupt checkpoint, another model or LoRA
 * shape is a usage error naming the key. A store this host cannot read is left to the run (openRun
 * resolves it again and fails at once the same way).
 */
async function checkInitFrom(config: RunConfig, initFrom: string | undefined, runId: string): Promise<string | undefined> {
  const spec = initFrom ?? config.model.init_from;
  if (spec === undefined) return undefined;
  try {
    parseInitFrom(spec);
    const resolved = { ...config, model: { ...config.model, path: resolveConfigPath(config.model.path), init_from: spec } };
    const a = config.artifacts.root ? { ...config.artifacts, root: resolveConfigPath(config.artifacts.root) } : config.artifacts;
    const init = await resolveInitFrom(storeFor(storeSettings(a), defaultStore()), resolved, runId);
    return `${init.run_id}@${init.step} (${init.adapter.uri})`;
  } catch (err) {
    if (err instanceof InitFromError) throw new CliError(initFrom !== undefined ? err.message.replace(/^model.init_from/, '--init-from') : err.message, EXIT.invalidInput);
    console.warn(`${c.yellow('note')} could not check init_from here (${(err as Error).message.slice(0, 200)}); the run checks it when it opens`);
    return undefined;
  }
}

export function defaultRunId(name: string | undefined, now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace(/\..*$/, '').replace('T', '-');
  return `${name ?? 'run'}-${stamp}`;
}

interface RunCommand {
  name: 'train' | 'sft';
  workflowType: 'TrainRun' | 'SftRun';
  description: string;
  example: string;
}

const COMMANDS: RunCommand[] = [
  { name: 'train', workflowType: 'TrainRun', description: 'start a TrainRun from a run config (validated here first)', example: 'configs/swe-grep/smoke.toml' },
  {
    name: 'sft', workflowType: 'SftRun', example: 'configs/swe-grep/sft.toml',
    description: 'start an SftRun: supervised fine-tuning on the trajectories of the config\'s [sft] section (validated here first)',
  },
];

export function register(program: Command): void {
  for (const spec of COMMANDS) registerRun(program, spec);
}

function registerRun(program: Command, spec: RunCommand): void {
  const { name: cmdName, workflowType, example } = spec;
  program.command(cmdName)
    .description(spec.description)
    .argument('<config>', `run config, e.g. ${example}`)
    .option('--run-id <id>', 'workflow id of the run (default: <config name>-<UTC time>); an existing id with a finished step resumes')
    .option('--wait', 'follow the run: one line per step with reward and components, then the Web UI URL')
    .option('--no-check', 'skip `ratchet check` (config, environments, datasets, model, host, stack) before starting')
    .option('--init-from <run[@step]>', 'start from another run\'s adapter (its last checkpoint, or that step\'s): over the config\'s [model] init_from')
    .addHelpText('after', `\nExamples:\n  $ ratchet ${cmdName} ${example}\n  $ ratchet ${cmdName} ${example} --run-id ${cmdName}-1 --wait\n\n` +
      `Same as: temporal workflow start --type ${workflowType} --task-queue ratchet --input '{"configPath": "..."}'`)
    .action(async (configPath: string, opts: { runId?: string; wait?: boolean; check: boolean; initFrom?: string }, cmd: Command) => {
      const g = cmd.optsWithGlobals<{ address?: string; namespace?: string }>();
      if (opts.runId !== undefined && !/^[A-Za-z0-9._-]+$/.test(opts.runId)) throw new CliError(`--run-id "${opts.runId}": use letters, digits, ".", "_" and "-" only`, EXIT.usage);
      // The same checks as `ratchet check`: a run that would fail on its config, data or model never starts.
      let name: string | undefined;
      let weight: number | undefined;
      let hasSft = false;
      let config: RunConfig | undefined;
      if (opts.check) {
        const checked = (await checkOrThrow(configPath, { ...g, stack: true, quiet: true })).config;
        config = checked;
        name = checked?.name;
        weight = checked?.orchestrator.fairness_weight;
        hasSft = checked?.sft !== undefined;
      } else {
        try {
          const loaded = (await loadRunConfig(configPath)).config;
          config = loaded;
          name = loaded.name;
          weight = loaded.orchestrator.fairness_weight;
          hasSft = loaded.sft !== undefined;
        } catch (err) {
          if (err instanceof ConfigError) throw new CliError(err.message, EXIT.invalidInput);
          throw err;
        }
      }
      if (workflowType === 'SftRun' && !hasSft) {
        throw new CliError(`${configPath}: ratchet sft needs an [sft] section naming its trajectories, e.g. [sft] data = ["demos.jsonl"]. ` +
          'Fix: add it (docs/training.md, "Supervised fine-tuning")', EXIT.invalidInput);
      }
      const runId = opts.runId ?? defaultRunId(name);
      if (opts.initFrom !== undefined) {
        try {
          parseInitFrom(opts.initFrom);
        } catch (err) {
          throw new CliError((err as Error).message.replace(/^model.init_from/, '--init-from'), EXIT.invalidInput);
        }
      }
      const from = config ? await checkInitFrom(config, opts.initFrom, runId) : undefined;
      if (from) console.log(`${c.dim('starts from')} ${from}`);
      const { client, close } = await connectClient(g);
      try {
        const input: TrainRunInput = { configPath, runId, ...(opts.initFrom !== undefined ? { initFrom: opts.initFrom } : {}) };
        let handle;
        try {
          // The run's keys on its own workflow too: every activity it starts inherits them (src/shared/fairness.ts).
          handle = await client.workflow.start(workflowType, { taskQueue: TASK_QUEUES.main, workflowId: runId, args: [input], priority: trainingPriority(runId, weight) });
        } catch (err) {
          if (err instanceof WorkflowExecutionAlreadyStartedError) {
            throw new CliError(`run "${runId}" is already running. Follow it: ratchet status ${runId}; or pick another --run-id`, EXIT.failure);
          }
          throw err;
        }
        console.log(`${c.green('started')} ${c.bold(runId)}  ${workflowUiUrl(runId, handle.firstExecutionRunId)}`);
        if (!opts.wait) {
          console.log(`follow it: ratchet status ${runId}`);
          return;
        }
        const res = await followRun(client, runId);
        console.log(`${c.bold(runId)} ${res.status.toLowerCase()}`);
        console.log(`Web UI:  ${workflowUiUrl(runId)}`);
        console.log(`report:  ratchet report ${runId}`);
        if (res.status !== 'COMPLETED') process.exitCode = EXIT.failure;
      } finally {
        await close();
      }
    });
}
