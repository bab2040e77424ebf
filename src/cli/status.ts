import type { Command } from 'commander';
import { DEFAULTS } from '../shared/paths';
import { EXIT } from './exit';
import { followRun } from './follow';
import { connectClient, workflowUiUrl } from './temporal';
import { c, fmtReward } from './term';

function sa(attrs: Record<string, unknown> | undefined, key: string): unknown {
  const v = attrs?.[key];
  return Array.isArray(v) ? v[0] : v;
}

export function register(program: Command): void {
  program.command('status')
    .description('without a run: list recent runs; with one: finished steps and a live bar for the current step')
    .argument('[run]', 'run id (the TrainRun or SftRun workflow id)')
    .option('--once', 'print a snapshot and exit instead of following the run')
    .option('-n, --limit <n>', 'runs to list', '20')
    .addHelpText('after', '\nExamples:\n  $ ratchet status\n  $ ratchet status smoke-1\n  $ ratchet status smoke-1 --once')
    .action(async (run: string | undefined, opts: { once?: boolean; limit: string }, cmd: Command) => {
      const g = cmd.optsWithGlobals<{ address?: string; namespace?: string }>();
      const { client, close } = await connectClient(g);
      try {
        if (!run) {
          let n = 0;
          const limit = Number(opts.limit) || 20;
          for await (const wf of client.workflow.list({ query: "WorkflowType = 'TrainRun' OR WorkflowType = 'SftRun'" })) {
            if (n++ === 0) console.log(c.dim(`${'run'.padEnd(28)} ${'status'.padEnd(21)} ${'step'.padStart(5)} ${'policy'.padStart(6)} ${'reward'.padStart(8)}  started`));
            const attrs = wf.searchAttributes as Record<string, unknown>;
            const st = wf.status.name;
            // A running run says what it is doing: running, paused, waiting-for-inference, waiting-for-trainer...
            const shown = st === 'RUNNING' ? String(sa(attrs, 'RatchetStatus') ?? st) : st;
            const paint = shown === 'running' || shown === 'RUNNING' ? c.green : st === 'COMPLETED' ? c.blue : st === 'FAILED' || st === 'TERMINATED' ? c.red : c.yellow;
            console.log(`${wf.workflowId.padEnd(28)} ${paint(shown.padEnd(21))} ${String(sa(attrs, 'RatchetStep') ?? '—').padStart(5)} ` +
              `${String(sa(attrs, 'RatchetPolicyVersion') ?? '—').padStart(6)} ${fmtReward(sa(attrs, 'RatchetMeanReward') as number | undefined).padStart(8)}  ${wf.startTime.toISOString()}`);
            if (n >= limit) break;
          }
          if (n === 0) console.log(`no runs yet. Start one: ratchet train configs/swe-grep/smoke.toml  (Web UI ${DEFAULTS.temporalUi})`);
          return;
        }
        const res = await followRun(client, run, { once: opts.once });
        if (res.status !== 'RUNNING') {
          const ended = res.status === 'FAILED' || res.status === 'TERMINATED' || res.status === 'TIMED_OUT' || res.status === 'CANCELLED';
          console.log(`${c.bold(run)} ${res.status.toLowerCase()} · ${workflowUiUrl(run)} · report: ratchet report ${run}` +
            (ended ? ` · restart from its last completed step: ratchet restart ${run}` : ''));
          if (ended && res.status !== 'CANCELLED') process.exitCode = EXIT.failure;
        }
      } finally {
        await close();
      }
    });
}
