import { shellTool } from '../shell';
import { codeRepair } from '../code-repair';
import { applyPatchTool } from '../code-repair/apply-patch';
import { REPO_DIR } from '../../sandbox/interface';
import { shq } from '../sandbox';
import type { ToolContext } from '../../agent/tool';
import type { HarborRowInfo } from '../../tasks/harbor';
import type { Environment, ScoreInput } from '../types';

const VERIFIER_CAP_MS = 30 * 60_000;
const OUTPUT_TAIL = 4000;

/**
 * Harbor's verifier, as Harbor runs it: after the agent finishes, tests/ is copied to /tests in the
 * agent's own sandbox and tests/test.sh runs there; it writes /logs/verifier/reward.txt (one number)
 * or reward.json ({name: number}). A missing or unreadable reward scores 0 and says why.
 */
export async function runHarborVerifier(ctx: ToolContext): Promise<Record<string, unknown>> {
  const info = (ctx.task as { harbor?: HarborRowInfo }).harbor;
  if (!info) throw new Error(`task "${ctx.task.instance_id}" has no harbor field: load Harbor tasks with \`ratchet harbor <dir> --out <tasks.jsonl>\` (docs/environments.md#harbor-tasks)`);
  const diff = await ctx.sandbox.diff();
  await ctx.sandbox.exec('rm -rf /tmp/harbor && mkdir -p /tmp/harbor/tests /tmp/harbor/logs/verifier /tmp/harbor/logs/agent', { timeoutMs: 30_000 });
  for (const [rel, content] of Object.entries(info.tests)) await ctx.sandbox.writeFile(`/tmp/harbor/tests/${rel}`, content);
  const run = await ctx.sandbox.exec('chmod -R u+x /tmp/harbor/tests; bash /tests/test.sh', {
    cwd: REPO_DIR, timeoutMs: Math.min(info.verifier_timeout_s * 1000, VERIFIER_CAP_MS), ...(ctx.signal ? { signal: ctx.signal } : {}),
  });
  const read = async (f: string) => {
    const r = await ctx.sandbox.exec(`cat ${shq(`/tmp/harbor/logs/verifier/${f}`)}`, { timeoutMs: 30_000 });
    return r.exitCode === 0 ? r.stdout : undefined;
  };
  const text = await read('reward.txt');
  const json = text === undefined ? await read('reward.json') : undefined;
  let reward: number | undefined;
  let rewards: Record<string, number> = {};
  let problem: string | undefined;
  if (text !== undefined) {
    reward = Number(text.trim());
    if (!Number.isFinite(reward)) { problem = `reward.txt holds ${JSON.stringify(text.slice(0, 40))}, not a number`; reward = undefined; }
  } else if (json !== undefined) {
    try {
      const v = JSON.parse(json) as Record<string, unknown>;
      rewards = Object.fromEntries(Object.entries(v).filter(([, x]) => typeof x === 'number' && Number.isFinite(x))) as Record<string, number>;
      const vals = Object.values(rewards);
      reward = rewards.reward ?? (vals.length > 0 ? vals.reduce((a, b) => a + b, 0) / vals.length : undefined);
      if (reward === undefined) problem = 'reward.json has no numeric value';
    } catch (err) {
      problem = `reward.json is not JSON: ${(err as Error).message}`;
    }
  } else {
    problem = 'tests/test.sh wrote neither /logs/verifier/reward.txt nor reward.json';
  }
  return {
    diff,
    ...(reward !== undefined ? { reward } : {}),
    rewards,
    verifier: { exit_code: run.exitCode, timed_out: run.timedOut, output: `${run.stdout}\n${run.stderr}`.slice(-OUTPUT_TAIL), ...(problem ? { problem } : {}) },
  };
}

const reward = (i: ScoreInput) => (typeof i.final.reward === 'number' && Number.isFinite(i.final.reward) ? i.final.reward : 0);

/**
 * Harbor tasks (src/tasks/harbor.ts) with Ratchet's own agent loop: the instruction as the task,
 * a shell and an editor in the task's image, scored by the task's own tests/test.sh.
 */
export const harbor: Environment = {
  id: 'harbor',
  systemPrompt: [
    'You are an agent solving a task in a Linux sandbox; your working directory holds the task\'s files.',
    'Use `shell` to inspect and run things and `apply_patch` to edit files (its `search` text must match exactly once).',
    'When the task is done, reply with a short summary and no tool call.',
  ].join('\n'),
  userPrompt: (task) => task.problem_statement,
  // The code-repair worked example: the same two tools on a made-up repository.
  demonstration: codeRepair.demonstration,
  tools: [shellTool('shell', 'Run a bash command in the working directory and see its output.'), applyPatchTool],
  finalize: (ctx) => runHarborVerifier(ctx),
  needsTests: false,
  needsRepository: true,
  rubric: [
    { name: 'reward', weight: 1, fn: reward },
    { name: 'verifier_wrote_reward', weight: 0, fn: (i) => (typeof i.final.reward === 'number' ? 1 : 0) },
  ],
  evalMetrics: { solved: { reward: 'reward', min: 1 } },
};
