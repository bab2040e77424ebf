import type { AgentLimits, AgentStats } from '../agent/loop';
import type { Tool, ToolContext } from '../agent/tool';
import type { StopReason } from '../contracts/trajectory';
import type { ChatMessage } from '../contracts/trajectory';
import type { HarnessSpec } from '../harness/run';
import type { Task } from '../tasks/schema';
import type { TestEvidence } from './tests';

/** What a rubric's reward functions see: pure data, no sandbox. */
export interface ScoreInput {
  task: Task;
  /** The environment's final answer (files, a diff...). */
  final: Record<string, unknown>;
  /** Whether an answer tool ended the episode. */
  answered: boolean;
  stop_reason: StopReason;
  stats: AgentStats;
  limits: AgentLimits;
  /** Test outcomes from a fresh sandbox, for the envs that run tests. */
  tests?: TestEvidence;
}

/** One reward function: one number, logged on its own, weighted by the rubric. */
export interface RewardFn {
  name: string;
  /** Default weight; 0 means reported only. The run config's [[env]].rubric overrides it. */
  weight: number;
  fn: (input: ScoreInput) => number;
}

/**
 * Precision, recall and F1 of a set the agent names (files, functions), as three of the
 * environment's rewards. An eval macro-averages them over the episodes whose task has a
 * gold set (`applies`).
 */
export interface PrfMetric {
  precision: string;
  recall: string;
  f1: string;
  /** Whether the task has a gold set to compare with; default: every task. */
  applies?(task: Task): boolean;
}

/**
 * What an eval reports for an environment, named by its rewards: eval code reads
 * these and nothing else of the environment. Absent parts are not reported.
 */
export interface EvalMetrics {
  /**
   * An episode solved its task when this reward is at least `min`: pass@1 and pass@k.
   * Only tasks where `applies` holds count (e.g. those with tests to decide them); default: every task.
   */
  solved?: { reward: string; min: number; applies?(task: Task): boolean };
  /** Localization: file- and function-level precision / recall / F1. */
  localization?: { file?: PrfMetric; function?: PrfMetric };
}

/**
 * An environment, declaratively: how to prompt, which tools, how to read the
 * final answer, and the rubric. The agent loop and the rollout activity are shared.
 */
export interface Environment {
  /** The built-ins' ids are swe-grep, code-repair and debug; an environment from a module has its own. */
  id: string;
  systemPrompt: string;
  userPrompt(task: Task): string;
  /** A worked example episode on a made-up task, shown before the task when `few_shot = true`. */
  demonstration: ChatMessage[];
  tools: Tool[];
  /**
   * Other wordings of the prompt, chosen by `[env.args] prompt = "<name>"` (withPrompt): each replaces
   * the parts it names (system prompt, tools, worked example); the task, the answer and the rubric stay.
   * Built-in environments only: a module's export is not read for it.
   */
  prompts?: Record<string, PromptVariant>;
  /** Reads the final answer after the loop (from the answer tool, or the work tree). */
  finalize(ctx: ToolContext, answer: Record<string, unknown> | undefined): Promise<Record<string, unknown>>;
  /** Whether scoring runs the task's tests against the final diff in a fresh sandbox. */
  needsTests: boolean;
  rubric: RewardFn[];
  /** What an eval reports: which reward says "solved", which rewards are metrics. Default: none. */
  evalMetrics?: EvalMetrics;
  /**
   * Whether every task must bring a repository (`source`). Environments from a
   * module may say false: a task without one gets an empty /work sandbox.
   */
  needsRepository?: boolean;
  /** Runs in the sandbox before the first model turn (e.g. writes the task's files). */
  setup?(ctx: ToolContext): Promise<void>;
  /** Where it came from: "built-in" or the resolved module file. */
  origin?: string;
  /** The environment's own version, recorded in each step's lineage (default: its package.json's version; src/envs/provenance.ts). */
  version?: string;
  /**
   * The agent is an external program (Nano, mini-swe-agent, yours), not Ratchet's loop: it is
   * started per rollout against a token-capturing endpoint and runs its commands in the sandbox
   * (src/harness/run.ts). `tools` then only describe the harness's tools; the trajectory records
   * the specs the harness actually sent.
   */
  harness?: HarnessSpec;
}

/** The parts of an environment's prompt a variant may replace. Its tools must run as the environment's own do. */
export type PromptVariant = Partial<Pick<Environment, 'systemPrompt' | 'tools' | 'demonstration'>>;

/**
 * The environment as its `[env.args]` ask for it: itself when `prompt` is unset, else with the named
 * variant's parts in place of its own. An unknown name is the run's input error, named with the choices.
 */
export function withPrompt(env: Environment, args: Readonly<Record<string, unknown>>): Environment {
  if (args.prompt === undefined) return env;
  const variant = typeof args.prompt === 'string' && Object.hasOwn(env.prompts ?? {}, args.prompt) ? env.prompts![args.prompt] : undefined;
  if (!variant) {
    const known = Object.keys(env.prompts ?? {});
    throw new Error(`[env.args] prompt = ${JSON.stringify(args.prompt)}: environment "${env.id}" has no such prompt variant (${known.length ? `known: ${known.join(', ')}` : 'it has none'}). ` +
      `Fix: ${known.length ? `set prompt to one of ${known.map((k) => `"${k}"`).join(', ')}, or ` : ''}remove prompt to use the environment's own prompt`);
  }
  return { ...env, ...variant };
}

export interface Score {
  total: number;
  components: Record<string, number>;
  weights: Record<string, number>;
}

/** Weighted sum; every component is reported, whatever its weight. Unknown override names are an error. */
export function scoreRubric(rubric: RewardFn[], input: ScoreInput, overrides: Record<string, number> = {}): Score {
  const names = new Set(rubric.map((r) => r.name));
  for (const name of Object.keys(overrides)) {
    if (!names.has(name)) {
      throw new Error(`[[env]].rubric names "${name}", which is not a reward of this environment; known: ${[...names].join(', ')}`);
    }
  }
  const components: Record<string, number> = {};
  const weights: Record<string, number> = {};
  let total = 0;
  for (const r of rubric) {
    const value = r.fn(input);
    const weight = overrides[r.name] ?? r.weight;
    components[r.name] = Number.isFinite(value) ? value : 0;
    weights[r.name] = weight;
    total += weight * components[r.name]!;
  }
  return { total, components, weights };
}

/** Zero for every component: what a broken rollout scores. */
export function zeroScore(rubric: RewardFn[], overrides: Record<string, number> = {}): Score {
  const components: Record<string, number> = {};
  const weights: Record<string, number> = {};
  for (const r of rubric) {
    components[r.name] = 0;
    weights[r.name] = overrides[r.name] ?? r.weight;
  }
  return { total: 0, components, weights };
}
