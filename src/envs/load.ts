import { existsSync, statSync } from 'node:fs';
import * as path from 'node:path';
import { zodToJsonSchema, type ToolContext } from '../agent/tool';
import type { z } from 'zod';
import { REPO_ROOT } from '../shared/paths';
import type { Task } from '../tasks/schema';
import { ENVIRONMENTS } from './registry';
import type { HarnessSpec } from '../harness/run';
import type { Environment, EvalMetrics, RewardFn, ScoreInput } from './types';

/**
 * Environments from outside this repository: a local module or an installed
 * package named by `[[env]].module`, exporting the same declarative definition
 * the built-ins are (docs/environments.md). Everything a run needs from it is
 * checked here, once, before any rollout, and every problem names the module.
 */
export class EnvironmentError extends Error {
  constructor(readonly module: string, readonly problems: string[]) {
    super(`environment module ${module}:\n${problems.map((p) => `  - ${p}`).join('\n')}\nFix: see docs/environments.md for what an environment exports.`);
    this.name = 'EnvironmentError';
  }
}

export interface EnvSpec {
  id: string;
  module?: string;
}

/** A module path or package name as the config wrote it, made absolute. Paths resolve against the repository root. */
export function resolveEnvModule(spec: string, baseDir: string = REPO_ROOT): string {
  const isPath = spec.startsWith('.') || spec.startsWith('/') || spec.includes(path.sep) && existsSync(path.resolve(baseDir, spec));
  if (isPath) {
    const abs = path.resolve(baseDir, spec);
    try {
      return require.resolve(abs);
    } catch {
      throw new EnvironmentError(spec, [`cannot find ${abs} (nor ${abs}/index.js): env.module must be a JavaScript module (compile TypeScript first) or a package name`]);
    }
  }
  try {
    return require.resolve(spec, { paths: [baseDir, process.cwd()] });
  } catch {
    throw new EnvironmentError(spec, [`package "${spec}" is not installed where ${baseDir} can see it. Fix: npm install it, or give a path starting with ./`]);
  }
}

/** The folder a module's relative paths (its dataset) resolve against. */
export function envModuleDir(resolvedModule: string): string {
  return statSync(resolvedModule).isDirectory() ? resolvedModule : path.dirname(resolvedModule);
}

const loaded = new Map<string, Environment>();

/** The environment a config's [[env]] section names: built in, or loaded (once per process) from its module. */
export function loadEnvironment(spec: EnvSpec, baseDir: string = REPO_ROOT): Environment {
  if (spec.module === undefined) {
    const env = (ENVIRONMENTS as Record<string, Environment>)[spec.id];
    if (!env) throw new Error(`unknown environment "${spec.id}"; built in: ${Object.keys(ENVIRONMENTS).join(', ')}. Set env.module for your own (docs/environments.md)`);
    return env;
  }
  const file = resolveEnvModule(spec.module, baseDir);
  const key = `${file}\0${spec.id}`;
  const hit = loaded.get(key);
  if (hit) return hit;
  let exported: unknown;
  try {
    // A run-time path from the config: require is the point (Node 20 loads CommonJS and, since 20.19, ES modules this way).
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    exported = require(file) as unknown;
  } catch (err) {
    throw new EnvironmentError(spec.module, [`loading it threw: ${(err as Error).stack?.split('\n').slice(0, 3).join(' / ') ?? String(err)}`]);
  }
  const env = validateEnvironment(pickExport(exported, spec.id), spec.module, spec.id);
  env.origin = file;
  loaded.set(key, env);
  return env;
}

/** `environment`, `default`, or an `environments` map by id: the three shapes a module may export. */
function pickExport(mod: unknown, id: string): unknown {
  const m = (mod ?? {}) as Record<string, unknown>;
  if (m.environments && typeof m.environments === 'object') return (m.environments as Record<string, unknown>)[id];
  if (m.environment !== undefined) return m.environment;
  if (m.default !== undefined) {
    const d = m.default as Record<string, unknown>;
    return d.environment ?? d;
  }
  return undefined;
}

const isFn = (v: unknown): v is (...a: unknown[]) => unknown => typeof v === 'function';
/** Zod objects from any copy of zod (the module may bring its own): duck-typed by their definition. */
const isZodObject = (v: unknown): boolean => {
  const def = (v as { _def?: { typeName?: string } } | null)?._def;
  return def?.typeName === 'ZodObject' && isFn((v as { safeParse?: unknown }).safeParse);
};

/** Structural checks of an environment definition; every problem at once, each naming the export. */
export function validateEnvironment(raw: unknown, module: string, id: string): Environment {
  const problems: string[] = [];
  if (raw === undefined || raw === null || typeof raw !== 'object') {
    throw new EnvironmentError(module, [`no environment exported: export \`environment\` (or a default export, or \`environments["${id}"]\`) as an object`]);
  }
  const e = raw as Record<string, unknown>;
  if (e.id !== undefined && e.id !== id) problems.push(`exports id "${String(e.id)}", but the run config's [[env]].id is "${id}"`);
  if (typeof e.systemPrompt !== 'string' || e.systemPrompt.trim() === '') problems.push('missing export field `systemPrompt` (a non-empty string)');
  if (!isFn(e.userPrompt)) problems.push('missing export field `userPrompt` (a function of the task returning the first user message)');
  if (e.finalize !== undefined && !isFn(e.finalize)) problems.push('`finalize` must be a function (ctx, answer) => final answer');
  if (e.setup !== undefined && !isFn(e.setup)) problems.push('`setup` must be a function (ctx) => Promise<void>');
  if (e.version !== undefined && (typeof e.version !== 'string' || e.version === '')) problems.push('`version` must be a non-empty string (recorded in each step\'s lineage), or left out for the package.json version');
  if (e.demonstration !== undefined && !Array.isArray(e.demonstration)) problems.push('`demonstration` must be an array of chat messages');
  if (!Array.isArray(e.tools) || e.tools.length === 0) {
    problems.push('missing export field `tools` (a non-empty array of { name, description, args: z.object(...), run })');
  } else {
    const names = new Set<string>();
    e.tools.forEach((t: unknown, i) => {
      const tool = (t ?? {}) as Record<string, unknown>;
      const label = typeof tool.name === 'string' && tool.name ? `tool "${tool.name}"` : `tools[${i}]`;
      if (typeof tool.name !== 'string' || !/^[A-Za-z_][A-Za-z0-9_-]{0,63}$/.test(tool.name)) problems.push(`${label}: \`name\` must be an identifier (letters, digits, _ and -)`);
      else if (names.has(tool.name)) problems.push(`${label}: two tools have this name`);
      else names.add(tool.name);
      if (typeof tool.description !== 'string' || tool.description.trim() === '') problems.push(`${label}: missing \`description\``);
      if (!isZodObject(tool.args)) {
        problems.push(`${label}: no schema: \`args\` must be a zod object (z.object({...})), from which the model's JSON schema is derived`);
      } else {
        try {
          zodToJsonSchema(tool.args as z.ZodTypeAny);
        } catch (err) {
          problems.push(`${label}: its schema cannot be sent to the model: ${(err as Error).message}`);
        }
      }
      if (!isFn(tool.run)) problems.push(`${label}: missing \`run(args, ctx)\``);
    });
  }
  const names = new Set<string>();
  if (!Array.isArray(e.rubric) || e.rubric.length === 0) {
    problems.push('missing export field `rubric` (a non-empty array of { name, weight, fn })');
  } else {
    e.rubric.forEach((r: unknown, i) => {
      const rf = (r ?? {}) as Record<string, unknown>;
      const label = typeof rf.name === 'string' && rf.name ? `reward "${rf.name}"` : `rubric[${i}]`;
      if (typeof rf.name !== 'string' || rf.name === '') problems.push(`${label}: missing \`name\``);
      else if (names.has(rf.name)) problems.push(`${label}: two rewards have this name`);
      else names.add(rf.name);
      if (typeof rf.weight !== 'number' || !Number.isFinite(rf.weight)) problems.push(`${label}: \`weight\` must be a finite number`);
      if (!isFn(rf.fn)) problems.push(`${label}: missing \`fn(input)\` returning a number`);
    });
  }
  if (e.evalMetrics !== undefined) problems.push(...evalMetricsProblems(e.evalMetrics, names));
  if (e.harness !== undefined) problems.push(...harnessSpecProblems(e.harness));
  if (problems.length > 0) throw new EnvironmentError(module, problems);
  return {
    id,
    systemPrompt: e.systemPrompt as string,
    userPrompt: e.userPrompt as Environment['userPrompt'],
    demonstration: (e.demonstration as Environment['demonstration'] | undefined) ?? [],
    tools: e.tools as Environment['tools'],
    finalize: (e.finalize as Environment['finalize'] | undefined) ?? (async (_ctx: ToolContext, answer) => answer ?? {}),
    needsTests: e.needsTests === true,
    rubric: e.rubric as RewardFn[],
    needsRepository: e.needsRepository !== false,
    ...(isFn(e.setup) ? { setup: e.setup as Environment['setup'] } : {}),
    ...(e.evalMetrics !== undefined ? { evalMetrics: e.evalMetrics as EvalMetrics } : {}),
    ...(e.harness !== undefined ? { harness: e.harness as HarnessSpec } : {}),
    ...(typeof e.version === 'string' ? { version: e.version } : {}),
  };
}

/** `harness` (docs/environments.md#your-own-harness): a name, an absolute program with its arguments, a time limit. */
export function harnessSpecProblems(raw: unknown): string[] {
  if (raw === null || typeof raw !== 'object') return ['`harness` must be an object { name, command, timeout_s }'];
  const h = raw as Record<string, unknown>;
  const problems: string[] = [];
  if (typeof h.name !== 'string' || h.name === '') problems.push('harness.name must be a non-empty string');
  if (!Array.isArray(h.command) || h.command.length === 0 || !h.command.every((a) => typeof a === 'string')) problems.push('harness.command must be a non-empty array of strings (program, then arguments)');
  else if (!path.isAbsolute(h.command[0] as string)) problems.push(`harness.command[0] must be an absolute path (got "${String(h.command[0])}"): the harness starts with an empty PATH of its own`);
  if (typeof h.timeout_s !== 'number' || !(h.timeout_s > 0)) problems.push('harness.timeout_s must be a positive number of seconds');
  if (h.isolate === false) problems.push('harness.isolate = false is for Ratchet\'s own tests only: a run always isolates its harnesses');
  if (h.args !== undefined && (h.args === null || typeof h.args !== 'object')) problems.push('harness.args must be an object');
  return problems;
}

/** `evalMetrics` names rewards of the rubric, each part in its shape (docs/environments.md). */
export function evalMetricsProblems(raw: unknown, rewards: Set<string>): string[] {
  if (raw === null || typeof raw !== 'object') return ['`evalMetrics` must be an object { solved?, localization? }'];
  const m = raw as Record<string, unknown>;
  const problems: string[] = [];
  const reward = (where: string, v: unknown) => {
    if (typeof v !== 'string' || !rewards.has(v)) problems.push(`${where} must name a reward of the rubric (got ${JSON.stringify(v) ?? 'nothing'}; rewards: ${[...rewards].join(', ')})`);
  };
  const applies = (where: string, v: unknown) => {
    if (v !== undefined && !isFn(v)) problems.push(`${where}.applies must be a function (task) => boolean`);
  };
  if (m.solved !== undefined) {
    const s = (m.solved ?? {}) as Record<string, unknown>;
    reward('evalMetrics.solved.reward', s.reward);
    if (typeof s.min !== 'number' || !Number.isFinite(s.min)) problems.push('evalMetrics.solved.min must be a finite number (solved when the reward is at least min)');
    applies('evalMetrics.solved', s.applies);
  }
  if (m.localization !== undefined) {
    const l = (m.localization ?? {}) as Record<string, unknown>;
    for (const level of ['file', 'function'] as const) {
      if (l[level] === undefined) continue;
      const prf = (l[level] ?? {}) as Record<string, unknown>;
      for (const k of ['precision', 'recall', 'f1']) reward(`evalMetrics.localization.${level}.${k}`, prf[k]);
      applies(`evalMetrics.localization.${level}`, prf.applies);
    }
  }
  return problems;
}

/**
 * Calls every reward and the prompt once on a real task (the dataset's first
 * row) and an empty episode: a reward that throws or is not a finite number,
 * or a prompt that is not a string, is found before any rollout.
 */
export function probeEnvironment(env: Environment, task: Task, moduleName: string): void {
  const problems: string[] = [];
  try {
    const p = env.userPrompt(task);
    if (typeof p !== 'string' || p === '') problems.push(`userPrompt(task "${task.instance_id}") returned ${typeof p === 'string' ? 'an empty string' : typeof p}, not a string`);
  } catch (err) {
    problems.push(`userPrompt(task "${task.instance_id}") threw: ${(err as Error).message}`);
  }
  const input: ScoreInput = {
    task,
    final: {},
    answered: false,
    stop_reason: 'completed',
    stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} },
    limits: { max_tokens: 1, max_tool_calls: 1, max_turns: 1 },
  };
  for (const r of env.rubric) {
    try {
      const v = r.fn(input);
      if (typeof v !== 'number' || !Number.isFinite(v)) {
        problems.push(`reward "${r.name}" returned ${typeof v === 'number' ? String(v) : `a ${typeof v} (${String(JSON.stringify(v)).slice(0, 40)})`} for an empty answer; a reward returns a finite number`);
      }
    } catch (err) {
      problems.push(`reward "${r.name}" threw on an empty answer to task "${task.instance_id}": ${(err as Error).message}`);
    }
  }
  if (problems.length > 0) throw new EnvironmentError(moduleName, problems);
}

/**
 * Makes an [[env]] section's module absolute (the resolved file) and, for an
 * environment from a module, a relative dataset absolute against the module's
 * folder: an environment ships its own tasks. Built-ins keep their dataset
 * relative to the task set dir. Mutates and returns the sections.
 */
export function resolveEnvSections<T extends { id: string; module?: string; dataset: string }>(envs: T[], baseDir: string = REPO_ROOT): T[] {
  for (const e of envs) {
    if (e.module === undefined) continue;
    const file = resolveEnvModule(e.module, baseDir);
    if (!path.isAbsolute(e.dataset)) e.dataset = path.resolve(envModuleDir(file), e.dataset);
    e.module = file;
  }
  return envs;
}
