/**
 * Turn resume: the time to finish a rollout whose attempt was killed at turn 15 of 20, resumed from
 * its turn journal against started over (the baseline, measured in the same run), and the journal's
 * write cost per turn.
 *
 * The episode is scripted: untrained SmolLM2 ends most episodes in a turn or two (BENCHMARKS.md,
 * "Rollouts"), so 20 turns never happen naturally. A scripted policy plays 20 turns (19 read-only
 * shell commands, then the answer), each taking --turn-ms of simulated model time and returning
 * vLLM-sized token ids and logprobs (the prompt growing each turn); the tools run for real in a
 * hardened Docker sandbox with the task's repository, the journal goes to a local artifact store.
 *   npm run bench:turn-resume [-- --turn-ms 3000 --turns 20 --kill-at 15 --tasks .ratchet/tasks/train.jsonl]
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { MockActivityEnvironment } from '@temporalio/testing';
import pino from 'pino';
import { createRolloutActivities } from '../activities/rollout';
import type { Completion, CompletionRequest, ModelClient } from '../agent/model';
import { LocalArtifactStore } from '../artifacts/store';
import { RunConfig } from '../config/schema';
import type { RolloutInput } from '../contracts/rollout';
import { Trajectory, type RolloutSummary } from '../contracts/trajectory';
import { SandboxManager } from '../sandbox';
import { DEFAULTS, paths } from '../shared/paths';
import { loadTasks } from '../tasks/load';
import { machineLine, writeBenchSection } from './benchmarksFile';

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] ?? fallback : fallback;
}
const turnMs = Number(arg('turn-ms', '3000'));
const maxTurns = Number(arg('turns', '20'));
const killAt = Number(arg('kill-at', '15'));
const taskFile = arg('tasks', path.join(paths.tasks(), 'train.jsonl'));
const COMMANDS = ['ls', 'git log --oneline | head -3', 'git ls-files | head -20', 'grep -rn "def " --include=*.py . | head -10', 'wc -l $(git ls-files | head -5)'];

/** The scripted policy: `turnMs` per turn, 100 completion tokens, a prompt 600 + 250 a turn tokens long. */
class ScriptedPolicy implements ModelClient {
  requests = 0;
  constructor(private readonly onRequest?: (n: number) => void) {}
  async complete(req: CompletionRequest): Promise<Completion> {
    this.requests += 1;
    this.onRequest?.(this.requests);
    await sleep(turnMs, undefined, { signal: req.signal });
    const turn = req.messages.filter((m) => m.role === 'assistant').length;
    const last = turn >= maxTurns - 1;
    const ids = Array.from({ length: 100 }, (_, i) => (turn * 7919 + i * 31) % 49_152);
    return {
      content: `Turn ${turn + 1}: looking around.`,
      tool_calls: [{
        id: `call_${turn}`, type: 'function',
        function: last
          ? { name: 'result', arguments: JSON.stringify({ files: ['setup.py'], functions: [] }) }
          : { name: 'bash', arguments: JSON.stringify({ command: COMMANDS[turn % COMMANDS.length] }) },
      }],
      finish_reason: 'tool_calls',
      prompt_token_ids: Array.from({ length: 600 + 250 * turn }, (_, i) => (i * 13) % 49_152),
      completion_token_ids: ids,
      completion_logprobs: ids.map((i) => -((i % 97) / 50)),
      prompt_tokens: 600 + 250 * turn,
      completion_tokens: ids.length,
    };
  }
}

async function main(): Promise<void> {
  const { tasks } = await loadTasks(taskFile, { onInvalid: 'skip' });
  const task = tasks[0];
  if (!task) throw new Error(`no tasks in ${taskFile}; generate them first (bash infra/taskgen.sh) or pass --tasks <file>`);
  const sandboxes = new SandboxManager({ log: pino({ level: 'warn' }) });
  const runId = `bench-turn-resume-${Date.now()}`;
  const input = (groupId: string): RolloutInput => ({
    runId, step: 0, groupId, rolloutIndex: 0, envId: 'swe-grep',
    task: { datasetPath: taskFile, instanceId: task.instance_id }, taskSetDir: path.dirname(taskFile),
    policyVersion: 0, modelName: 'scripted', sampling: { temperature: 1, top_p: 1, max_tokens: 200 },
    envArgs: { max_tokens: 100 * maxTurns + 100, max_tool_calls: maxTurns + 5, max_turns: maxTurns }, rubric: {},
    sandbox: { ...RunConfig.parse({ env: [{ id: 'swe-grep' }] }).sandbox, warm_pool_size: 0 },
    inferenceBaseUrl: DEFAULTS.inferenceUrl, seed: 1,
  });

  // Journal writes, timed where they happen: the store's put of a `.journal/` key.
  const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-resume-')));
  const puts: { ms: number; bytes: number }[] = [];
  const put = store.put.bind(store);
  store.put = async (key, data) => {
    const t = performance.now();
    const ref = await put(key, data);
    if (key.includes('.journal/')) puts.push({ ms: performance.now() - t, bytes: ref.bytes });
    return ref;
  };

  /** One rollout killed as it asks for turn killAt + 1: its wall time and how many turns it journaled. */
  async function killed(groupId: string): Promise<number> {
    const env = new MockActivityEnvironment({ attempt: 1 });
    const policy = new ScriptedPolicy((n) => { if (n === killAt + 1) env.cancel(); });
    const t = performance.now();
    await env.run(createRolloutActivities({ store, sandboxes, openaiFactory: () => policy }).rollout, input(groupId)).then(
      () => { throw new Error('the killed attempt finished'); }, () => undefined);
    return (performance.now() - t) / 1000;
  }
  /** The retry: its wall time, the policy's requests, and the trajectory it recorded. */
  async function retry(groupId: string, retryStore: LocalArtifactStore): Promise<{ s: number; requests: number; t: Trajectory }> {
    const policy = new ScriptedPolicy();
    const t0 = performance.now();
    const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 2 })
      .run(createRolloutActivities({ store: retryStore, sandboxes, openaiFactory: () => policy }).rollout, input(groupId));
    const s = (performance.now() - t0) / 1000;
    return { s, requests: policy.requests, t: Trajectory.parse(await retryStore.getJson(summary.trajectory)) };
  }

  // Resumed: the retry reads the killed attempt's journal.
  const killedResumeS = await killed('resumed');
  const journalPuts = puts.length;
  const resumed = await retry('resumed', store);
  // Started over (the baseline): the same kill, then a retry that finds no journal (an empty store), as before turn resume.
  const killedRestartS = await killed('restarted');
  const restarted = await retry('restarted', new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-resume-none-'))));
  await sandboxes.close();

  const first = puts.slice(0, journalPuts);
  const meanMs = first.reduce((a, p) => a + p.ms, 0) / Math.max(1, first.length);
  const maxMs = Math.max(...first.map((p) => p.ms));
  const meanKb = first.reduce((a, p) => a + p.bytes, 0) / Math.max(1, first.length) / 1024;
  const maxKb = Math.max(...first.map((p) => p.bytes)) / 1024;
  const row = (name: string, killedS: number, r: typeof resumed) =>
    `| ${name} | ${r.s.toFixed(1)} | ${(killedS + r.s).toFixed(1)} | ${r.requests} | ${r.t.turns.length} | ${r.t.resume ? `${r.t.resume.outcome}, ${r.t.resume.turns_replayed} replayed` : 'none (no journal)'} | ${r.t.stop_reason} |`;
  const lines = [
    '### Turn resume: a rollout killed at turn 15 of 20, resumed against started over',
    '',
    `${machineLine()}. Scripted episode (untrained SmolLM2 does not reach 20 turns): a policy that takes ${turnMs} ms a turn`,
    `(simulated model time) and returns 100 completion tokens a turn with logprobs, its prompt 600 + 250 a turn token ids long;`,
    `the tools (read-only shell commands, then the answer) run for real in a hardened Docker sandbox with the task's`,
    `repository (${task.instance_id}); the journal goes to a local artifact store. The attempt is cancelled as it asks for turn ${killAt + 1}`,
    `(${killAt} turns done); the retry either resumes from the journal or, the baseline in the same run, finds no journal and starts over.`,
    '',
    '    npm run bench:turn-resume' + (process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''),
    '',
    '| retry | retry s | killed attempt + retry s | policy requests in the retry | turns | resume | stop |',
    '| --- | --- | --- | --- | --- | --- | --- |',
    row('resumed from the journal', killedResumeS, resumed),
    row('started over (baseline)', killedRestartS, restarted),
    '',
    `Retry time, resumed / started over: ${(resumed.s / restarted.s).toFixed(2)}x (${(restarted.s / resumed.s).toFixed(2)}x faster).`,
    `The resumed retry acquired a fresh sandbox, replayed the ${killAt} journaled tool calls in it (each output checked), then asked the policy`,
    `for ${resumed.requests} turns. Journal write cost: one part a turn, ${first.length} parts, mean ${meanMs.toFixed(1)} ms (max ${maxMs.toFixed(1)} ms)`,
    `and ${meanKb.toFixed(1)} KiB (max ${maxKb.toFixed(1)} KiB, growing with the prompt's token ids) a turn, against ${turnMs} ms of model time a turn.`,
  ];
  console.log(lines.join('\n'));
  writeBenchSection('turn-resume', lines);
}

main().catch((err: Error) => {
  console.error(err.stack ?? err.message);
  process.exit(1);
});
