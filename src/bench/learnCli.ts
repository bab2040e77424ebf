/**
 * `npm run bench:learn`: the multi-turn agent case by default (src/bench/learnAgentBench.ts),
 * or `--case one-turn`, the one-turn traceback case (src/bench/learn.ts). Each writes its own
 * section of BENCHMARKS.md.
 *   npm run bench:learn [-- --seeds 2 --steps 8 ...]
 *   npm run bench:learn -- --case one-turn [--steps 30 ...] [--render <run>,<control>]
 *   npm run bench:learn -- --sft-run <id> ...             (the agent case from an earlier bench run's warm start)
 *   npm run bench:learn -- <same flags> --resume <stamp>  (carry on a bench whose process stopped: its workflows are attached to or read back)
 *   npm run bench:learn -- --preflight-only [...]         (demonstrations, SFT, the pre-flight; prints it, BENCHMARKS.md unchanged)
 *   npm run bench:learn -- --render-agent <result.json>   (the agent table again from a finished bench run)
 *   npm run bench:learn -- --render-agent-runs <sft>,<run>,... [same flags]   (the table from finished runs)
 */
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { paths } from '../shared/paths';
import { writeBenchSection } from './benchmarksFile';
import { learnSection, parseLearnArgs, runLearnBench, storedRun, writeReports, type LearnResult } from './learn';
import { agentCommand, parseAgentArgs, runAgentBench, storedAgentResult, type AgentLearnOptions, type AgentLearnResult } from './learnAgentBench';
import { agentSection } from './learnAgentSection';

const flag = (argv: string[], name: string): string | undefined => { const i = argv.indexOf(`--${name}`); return i >= 0 ? argv[i + 1] : undefined; };

async function agent(argv: string[]): Promise<string> {
  const renderFrom = flag(argv, 'render-agent');
  const fromRuns = flag(argv, 'render-agent-runs')?.split(',');
  let o: AgentLearnOptions;
  let result: AgentLearnResult;
  if (fromRuns) {
    // <sft run>,<arm run>,...: the table from finished runs (same flags as their bench run), nothing re-run.
    o = parseAgentArgs(argv);
    const [sftId, ...runIds] = fromRuns;
    if (!sftId || runIds.length === 0) throw new Error('--render-agent-runs: give the SftRun, then the arms\' runs: <sft>,<run>,...');
    result = await storedAgentResult(o, sftId, runIds, mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-learn-agent-')));
  } else if (renderFrom) {
    ({ options: o, result } = JSON.parse(readFileSync(renderFrom, 'utf8')) as { options: AgentLearnOptions; result: AgentLearnResult });
  } else {
    o = parseAgentArgs(argv);
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-learn-agent-'));
    const preflightOnly = argv.includes('--preflight-only');
    result = await runAgentBench(o, dir, { preflightOnly });
    // Kept beside the runs, so the table can be written again (--render-agent) without rerunning.
    const saved = path.join(paths.artifacts(), 'bench', `learn-agent-${result.sft.runId}.json`);
    mkdirSync(path.dirname(saved), { recursive: true });
    writeFileSync(saved, JSON.stringify({ options: o, result }, null, 1));
    process.stderr.write(`result: ${saved}\n`);
    if (preflightOnly) return JSON.stringify({ sft: { ...result.sft, records: result.sft.records.length }, preflight: result.preflight, tasks: result.tasks, wallS: result.wallS });
  }
  return writeBenchSection('learn-agent', agentSection(o, result, agentCommand(o)));
}

async function oneTurn(argv: string[]): Promise<string> {
  const o = parseLearnArgs(argv);
  // --render <run>,<control>: the table again from two finished runs (same flags as their bench run), nothing re-run.
  const render = flag(argv, 'render')?.split(',');
  let result: LearnResult;
  if (render) {
    if (render.length !== 2 || render.some((x) => !x)) throw new Error('--render: give the learning run and the control as <run>,<control>');
    const [learn, control] = await Promise.all(render.map(storedRun));
    result = { learn: learn!, control: control!, reports: await writeReports(learn!.runId, control!.runId) };
  } else {
    result = await runLearnBench(o);
  }
  return writeBenchSection('learn', learnSection(o, result));
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const kase = flag(argv, 'case') ?? 'agent';
  if (kase !== 'agent' && kase !== 'one-turn') throw new Error(`--case: ${JSON.stringify(kase)} is not agent or one-turn`);
  process.stdout.write(`${kase === 'agent' ? await agent(argv) : await oneTurn(argv)}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
