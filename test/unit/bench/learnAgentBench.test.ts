/**
 * bench:learn's multi-turn case (src/bench/learnAgentBench.ts), without the stack: its flags,
 * the configs it writes (read back by the product's own config parser), the held-out episodes
 * it reads from a run's eval trajectories, and the figures and table it makes of them.
 */
import { mkdirSync, mkdtempSync, utimesSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { AGENT_DEFAULTS, agentRunConfigToml, agentSftConfigToml, agentSweepInput, parseAgentArgs, readEvalEpisodes, type AgentEpisode, type AgentLearnResult } from '../../../src/bench/learnAgentBench';
import { agentSection, armFigures } from '../../../src/bench/learnAgentSection';
import { parseRunConfig } from '../../../src/config/load';
import type { ChatMessage } from '../../../src/contracts/trajectory';

describe('parseAgentArgs', () => {
  test('defaults, flags over them, errors naming the flag', () => {
    expect(parseAgentArgs([])).toEqual(AGENT_DEFAULTS);
    expect(parseAgentArgs(['--seeds', '3', '--sft-lr', '0.001', '--held-out-package', 'toolz'])).toMatchObject({ seeds: 3, sftLr: 0.001, heldOutPackage: 'toolz' });
    expect(() => parseAgentArgs(['--max-turns', '2'])).toThrow(/--max-turns: "2" is not a number >= 3/);
    expect(() => parseAgentArgs(['--k', 'many'])).toThrow(/--k: "many" is not a number >= 1/);
    expect(() => parseAgentArgs(['--rubric', 'oops'])).toThrow(/--rubric: "oops" is not name=number/);
    expect(parseAgentArgs(['--control', 'runs']).control).toBe('runs');
    expect(() => parseAgentArgs(['--control', 'lr0'])).toThrow(/--control: "lr0" is not warm-start or runs/);
    expect(() => parseAgentArgs(['--advantage', 'grpo'])).toThrow(/--advantage: "grpo" is not rloo or dr_grpo/);
    expect(() => parseAgentArgs(['--preflight-lo', '0.9', '--preflight-hi', '0.5'])).toThrow(/--preflight-lo 0.9 is above --preflight-hi 0.5/);
    expect(() => parseAgentArgs(['--preflight-hi', '2'])).toThrow(/--preflight-hi: "2" is not a number >= 0 and <= 1/);
    expect(parseAgentArgs(['--resume', 'mx0730u4']).resume).toBe('mx0730u4');
    expect(parseAgentArgs(['--warm-step', '5']).warmStep).toBe(5);
    expect(() => parseAgentArgs(['--warm-step', 'best'])).toThrow(/--warm-step: "best" is not a step number/);
    expect(() => parseAgentArgs(['--resume', 'bench-agent-rl-s0-mx0730u4'])).toThrow(/--resume: .* is not a bench stamp\. Fix: give the suffix/);
  });

  test('--eval-concurrency is each EvalSweep\'s episodes in flight (8 unless given), still seeded by task and sample', () => {
    const sweep = (argv: string[]) => {
      const o = parseAgentArgs(argv);
      return agentSweepInput({ runId: 'r', version: 3, evalFile: '/x/heldout.jsonl', k: o.k, concurrency: o.evalConcurrency });
    };
    expect(sweep([])).toEqual({ runId: 'r', versions: [3], taskset: '/x/heldout.jsonl', k: 2, force: true, maxConcurrent: 8, seeds: 'task-sample' });
    expect(sweep(['--eval-concurrency', '4']).maxConcurrent).toBe(4);
    expect(() => parseAgentArgs(['--eval-concurrency', '0'])).toThrow(/--eval-concurrency: "0" is not a number >= 1/);
  });
});

describe('the configs the bench writes', () => {
  test('an arm: from the SFT run\'s best step, tool_choice auto, multi-turn, no few-shot, its seed and lr, reward file F1, RLOO with filtering', () => {
    const c = parseRunConfig(agentRunConfigToml(AGENT_DEFAULTS, { name: 'a', lr: 0, seed: 1, dataset: '/x/train.jsonl', initFrom: 'bench-agent-sft-1@4' }), 'arm.toml');
    expect(c.model.init_from).toBe('bench-agent-sft-1@4');
    expect(c.trainer.optim.lr).toBe(0);
    expect(c.orchestrator.seed).toBe(1);
    expect(c.sampling.tool_choice).toBe('auto');
    const env = c.env[0]!;
    expect(env.args).toMatchObject({ max_turns: 4, max_tool_calls: 4, few_shot: false });
    // Every weighted reward of swe-grep at 0, file_f1 at 1.
    expect(env.rubric).toEqual({
      correct_files: 0, incorrect_files_penalty: 0, missed_files_penalty: 0, max_tokens_penalty: 0, max_tool_calls_penalty: 0, completion_bonus: 0, file_f1: 1,
    });
    expect(c.orchestrator).toMatchObject({
      async_level: 0, limit_ended: 'score', advantage: { kind: 'rloo' }, difficulty_filter: { enabled: true, max_refill_rounds: 2 },
      pass_rate_pool: { enabled: true, pass_reward: 1 },
    });
    expect(c.trainer.minibatches).toBe(2);
    expect(parseRunConfig(agentRunConfigToml({ ...AGENT_DEFAULTS, refillRounds: 0 }, { name: 'a', lr: 0, seed: 1, dataset: '/x/t.jsonl', initFrom: 's' }), 'a.toml')
      .orchestrator.difficulty_filter.enabled).toBe(false);
  });
  test('the SftRun: the demonstrations file, its steps, batch and lr; its episodes sampled, bounded and scored as the arms\' are', () => {
    const c = parseRunConfig(agentSftConfigToml(AGENT_DEFAULTS, { name: 'sft', data: '/x/demos.jsonl', dataset: '/x/train.jsonl' }), 'sft.toml');
    expect(c.sft).toMatchObject({ data: ['/x/demos.jsonl'], batch_size: 8 });
    expect(c.orchestrator.max_steps).toBe(AGENT_DEFAULTS.sftSteps);
    expect(c.trainer.optim.lr).toBe(0.002);
    expect(c.trainer.minibatches).toBe(1);
    // Its own EvalSweep is the control: the same sampling, env args and rubric as an arm's run, or the arms are not comparable.
    const arm = parseRunConfig(agentRunConfigToml(AGENT_DEFAULTS, { name: 'a', lr: 0, seed: 0, dataset: '/x/train.jsonl', initFrom: 'sft' }), 'arm.toml');
    expect(c.sampling).toEqual(arm.sampling);
    expect(c.env).toEqual(arm.env);
    expect(c.sampling).toMatchObject({ temperature: 0.7, max_tokens: 128, tool_choice: 'auto' });
  });
});

const call = (name: string): ChatMessage => ({ role: 'assistant', content: '', tool_calls: [{ id: name, type: 'function', function: { name, arguments: '{}' } }] });
const out: ChatMessage = { role: 'tool', content: 'out', tool_call_id: 'x' };

function trajectory(task: string, messages: ChatMessage[], reward: number, f1: number): string {
  return JSON.stringify({
    format: 'ratchet.trajectory/v1', run_id: 'r', step: -1, env_id: 'swe-grep', task_id: task, group_id: `eval-v3-${task}`, rollout_index: 0,
    model: 'r/policy-v3', tools: [], messages: [{ role: 'user', content: 'q' }, ...messages],
    turns: messages.filter((m) => m.role === 'assistant').map(() => ({
      prompt_message_count: 1, prompt_token_ids: [1], completion_token_ids: [2], completion_logprobs: [-0.1], finish_reason: 'tool_calls', policy_version: 3, model_ms: 1, tools_ms: 1,
    })),
    stop_reason: 'completed', final: {}, reward: { total: reward, components: { file_precision: f1, file_recall: f1, file_f1: f1 } },
    stats: { prompt_tokens: 1, completion_tokens: 1, tool_calls: 1, tool_errors: 0, commands: [], tools_used: {} },
    timing: { model_ms: 1, tools_ms: 1, sandbox_ms: 1, total_ms: 3 },
  });
}

describe('readEvalEpisodes', () => {
  test('the version\'s episodes of the held-out tasks, the newest attempt of each sample, behaviour from the messages', () => {
    const artifacts = mkdtempSync(path.join(os.tmpdir(), 'bench-agent-'));
    const old = process.env.RATCHET_ARTIFACTS;
    process.env.RATCHET_ARTIFACTS = artifacts;
    try {
      const root = path.join(artifacts, 'runs', 'r', 'evals', 'trajectories');
      const put = (group: string, file: string, body: string, ageS: number) => {
        mkdirSync(path.join(root, group), { recursive: true });
        writeFileSync(path.join(root, group, file), body);
        const t = Date.now() / 1000 - ageS;
        utimesSync(path.join(root, group, file), t, t);
      };
      // t1: a stale first attempt (answered at once), then the retry that searched first; t2: one episode; other version and a task not held out: ignored.
      put('eval-v3-t1', '0-aaaa.json', trajectory('t1', [call('result'), out], -0.25, 0), 60);
      put('eval-v3-t1', '0-bbbb.json', trajectory('t1', [call('bash'), out, call('result'), out], 1.5, 1), 10);
      put('eval-v3-t2', '0.json', trajectory('t2', [call('bash'), out, call('bash'), out], -0.5, 0), 10);
      put('eval-v0-t1', '0-cccc.json', trajectory('t1', [call('result'), out], 0, 0), 10);
      put('eval-v3-t9', '0-dddd.json', trajectory('t9', [call('result'), out], 0, 0), 10);
      // Sample 1 of an earlier sweep with k=2: past this sweep's k=1, ignored.
      put('eval-v3-t2', '1-eeee.json', trajectory('t2', [call('result'), out], 1.5, 1), 5);
      mkdirSync(path.join(root, 'eval-v3-t1', '0.journal'), { recursive: true });
      const eps = readEvalEpisodes('r', 3, new Map([['t1', 'unseen'], ['t2', 'random']]), 1).sort((a, b) => a.task.localeCompare(b.task));
      expect(eps.map((e) => e.sample)).toEqual([0, 0]);
      expect(eps.map((e) => [e.task, e.split, e.reward, e.f1, e.behaviour])).toEqual([
        ['t1', 'unseen', 1.5, 1, { turns: 2, toolCalls: 2, answered: true, searchedBeforeAnswer: true }],
        ['t2', 'random', -0.5, 0, { turns: 2, toolCalls: 2, answered: false, searchedBeforeAnswer: false }],
      ]);
    } finally {
      if (old === undefined) delete process.env.RATCHET_ARTIFACTS; else process.env.RATCHET_ARTIFACTS = old;
    }
  });
});

const ep = (task: string, split: 'unseen' | 'random', reward: number, searched: boolean, turns: number): AgentEpisode => ({
  task, sample: 0, split, reward, precision: reward > 0 ? 1 : 0, recall: reward > 0 ? 1 : 0, f1: reward > 0 ? 1 : 0,
  behaviour: { turns, toolCalls: turns, answered: true, searchedBeforeAnswer: searched },
});

describe('armFigures and the table', () => {
  const rl = [ep('t1', 'unseen', 1.5, true, 3), ep('t1', 'unseen', -0.25, false, 1), ep('t2', 'random', 1.5, true, 3), ep('t2', 'random', 1.5, true, 3)];
  const control = [ep('t1', 'unseen', -0.25, false, 1), ep('t1', 'unseen', -0.25, false, 1), ep('t2', 'random', 1.5, true, 3), ep('t2', 'random', -0.25, true, 3)];
  test('reward is a mean over tasks; shares and means over episodes', () => {
    const f = armFigures(rl);
    expect(f.episodes).toBe(4);
    expect(f.reward.mean).toBeCloseTo((0.625 + 1.5) / 2, 10);
    expect(f.searched).toBe(0.75);
    expect(f.turns).toBe(2.5);
    expect(f.f1).toBe(0.75);
  });
  const record = (r: number, informative = 2, version = 0) =>
    ({ mean_reward: r, tool_calls: 8, rollouts: 4, samples: 4, groups: 4, informative_groups: informative, sampling_policy_version: version }) as never;
  const preflight = { episodes: 64, passed: 32, passRate: 0.5, band: [0.15, 0.85] as [number, number], passReward: 1, tasks: 16, informativeTasks: 8, minInformative: 0.33, signal: true };
  const sft = {
    runId: 'sft-1', demosRan: 10, demosKept: 7, demosHeldOut: 2, records: [{ trainer: { loss: 1.25 } } as never, { trainer: { loss: 0.5 } } as never],
    heldOutLoss: [0.9, 0.7], bestStep: 1, version: 2,
  };
  const base = { sft, preflight, tasks: { demo: 10, rl: 20, unseen: 1, random: 1 }, evalTasks: { unseen: 1, random: 1 }, reports: ['/a/runs/rl-0/report.html'], wallS: 600 };
  test('the section: a row per split and arm, the paired difference per seed on the primary split, the training table', () => {
    const result: AgentLearnResult = {
      ...base,
      arms: [
        { arm: 'rl', seed: 0, runId: 'rl-0', records: [record(0, 1, 2), record(1, 3, 3)], finalVersion: 2, episodes: rl },
        { arm: 'control', seed: -1, runId: 'sft-1', records: [], finalVersion: 2, episodes: control },
      ],
    };
    const o = { ...AGENT_DEFAULTS, lr: 0.001 };
    const s = agentSection(o, result, 'npm run bench:learn').join('\n');
    expect(s).toContain('of the 7 it solved, 2 were held out');
    expect(s).toContain('train loss per step: 1.250 0.500');
    expect(s).toContain('held-out loss per step: 0.900 0.700); the warm start is step 1 (v2)');
    expect(s).toContain('Pre-flight: the warm start on 64 RL-pool episodes passed 32 (pass rate 0.500, reward >= 1); band [0.15, 0.85]; 8 of 16 tasks had samples that scored differently (need 0.33): signal possible');
    expect(s).toMatch(/\| unseen package \(inflection, secondary\) \| RL, lr 0\.001 \| 2 \| 0\.625 /);
    // Primary split (t2 only): RL 1.5 - control 0.625 = 0.875; one seed, so the two-seed goal is not met.
    expect(s).toContain('by training seed: seed 0 0.875 [0.875, 0.875] over 1 tasks. Goal (both seeds\' intervals above 0): not met.');
    expect(s).toContain('secondary (unseen package) 0.875 [0.875, 0.875] over 1 tasks');
    // Informative groups / groups, and the version that sampled each step.
    expect(s).toContain('| RL, lr 0.001 | 0 | `rl-0` | 2 | 0.000 → 1.000 | 2.00 → 2.00 | 1/4@v2 3/4@v3 | 0.00 1.00 |');
    expect(s).toMatch(/\| unseen package \(inflection, secondary\) \| control: the warm start \(SFT only\) \| 2 \| -0\.250 /);
    expect(s).not.toContain('| control, lr 0 |');
    // With lr-0 control runs, they train and have their rows.
    const runs = agentSection({ ...o, control: 'runs' }, { ...result, arms: result.arms.map((a) => ({ ...a, seed: 0, records: [record(0), record(0)] })) }, 'x').join('\n');
    expect(runs).toContain('| control, lr 0 | 0 | `sft-1` | 2 |');
    expect(runs).toContain('| control, lr 0 (SFT only) |');
  });
  test('two seeds whose primary intervals are above 0 meet the goal; no signal possible writes no table', () => {
    const rl1 = rl.map((e) => ({ ...e }));
    const result: AgentLearnResult = {
      ...base,
      arms: [
        { arm: 'rl', seed: 0, runId: 'rl-0', records: [record(1)], finalVersion: 1, episodes: rl },
        { arm: 'rl', seed: 1, runId: 'rl-1', records: [record(1)], finalVersion: 1, episodes: rl1 },
        { arm: 'control', seed: -1, runId: 'sft-1', records: [], finalVersion: 2, episodes: control },
      ],
    };
    expect(agentSection(AGENT_DEFAULTS, result, 'x').join('\n')).toContain('seed 0 0.875 [0.875, 0.875] over 1 tasks; seed 1 0.875 [0.875, 0.875] over 1 tasks. Goal (both seeds\' intervals above 0): met.');
    const none = agentSection(AGENT_DEFAULTS, { ...base, arms: [], preflight: { ...preflight, passed: 4, passRate: 4 / 64, signal: false, reason: 'below 0.15' } }, 'x').join('\n');
    expect(none).toContain('(need 0.33): **no signal possible**: below 0.15');
    expect(none).toContain('No RL run was trained');
    expect(none).not.toContain('| held out | arm |');
  });
});
