import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { toolSpec } from '../agent/tool';
import type { RunConfig } from '../config/schema';
import { EnvironmentError, loadEnvironment, probeEnvironment } from '../envs/load';
import { withPrompt, type Environment } from '../envs/types';
import { formatProblem, loadTasks, resolveDataset, TaskLoadError } from '../tasks/load';
import type { Task } from '../tasks/schema';
import { fail, ok, type CheckLine } from './types';

/** Why an external harness cannot start on this host (its program, or the isolation it runs under), or undefined. */
export function harnessProblem(h: NonNullable<Environment['harness']>, builtIn: boolean): string | undefined {
  if (!existsSync(h.command[0]!)) return `its harness program ${h.command[0]} is not installed. Fix: ${builtIn ? 'bash infra/harness-env.sh' : 'install it on every rollout host, or correct harness.command'}`;
  if (h.isolate !== false) {
    if (process.getuid?.() !== 0) return 'an external harness runs in its own namespaces, which needs the rollout worker to run as root. Fix: run the ratchet-rollout worker as root';
    for (const bin of ['/usr/bin/unshare', '/usr/bin/setpriv']) if (!existsSync(bin)) return `${bin} is missing (the harness's isolation). Fix: apt-get install util-linux`;
  }
  return undefined;
}

/** Loads every [[env]]'s environment; each failure names the section and the module. */
export function checkEnvironments(c: RunConfig): { envs: (Environment | undefined)[]; lines: CheckLine[] } {
  const lines: CheckLine[] = [];
  const envs = c.env.map((section, i) => {
    let env: Environment;
    try {
      env = loadEnvironment({ id: section.id, module: section.module });
    } catch (err) {
      lines.push(fail('environments', `env.${i}${section.module ? `.module` : '.id'}: ${(err as Error).message}`));
      return undefined;
    }
    try {
      env = withPrompt(env, section.args);
    } catch (err) {
      lines.push(fail('environments', `env.${i}.args.prompt: ${(err as Error).message}`));
      return undefined;
    }
    const known = new Set(env.rubric.map((r) => r.name));
    const unknown = Object.keys(section.rubric).filter((k) => !known.has(k));
    if (unknown.length > 0) {
      lines.push(fail('environments', `env.${i}.rubric names ${unknown.map((u) => `"${u}"`).join(', ')}, not a reward of "${env.id}". Known: ${[...known].join(', ')}`));
    }
    try {
      env.tools.forEach(toolSpec);
    } catch (err) {
      lines.push(fail('environments', `env.${i} ("${env.id}"${section.module ? `, module ${section.module}` : ''}): a tool's schema cannot be sent to the model: ${(err as Error).message}`));
      return undefined;
    }
    if (env.harness) {
      const problem = harnessProblem(env.harness, section.module === undefined);
      if (problem) {
        lines.push(fail('environments', `env.${i} ("${env.id}"${section.module ? `, environment module ${section.module}` : ''}): ${problem}`));
        return undefined;
      }
      lines.push(ok('environments', `env.${i} "${env.id}": external harness ${env.harness.name} (${env.harness.command[0]}), ${env.rubric.length} rewards`));
      return env;
    }
    lines.push(ok('environments', `env.${i} "${env.id}" (${section.module ?? 'built in'}): ${env.tools.length} tools, ${env.rubric.length} rewards`));
    return env;
  });
  return { envs, lines };
}

/** Every row of every dataset: schema, size limits, duplicates, a repository per task, and a probe of the environment on the first. */
export async function checkDatasets(c: RunConfig, envs: (Environment | undefined)[], taskSetDir: string): Promise<{ tasksByEnv: (Task[] | undefined)[]; lines: CheckLine[] }> {
  const lines: CheckLine[] = [];
  const tasksByEnv: (Task[] | undefined)[] = [];
  for (const [i, section] of c.env.entries()) {
    const file = resolveDataset(section.dataset, taskSetDir);
    if (!existsSync(file)) {
      lines.push(fail('datasets', `env.${i}.dataset: ${file} does not exist. Fix: generate the task set (npm run setup builds .ratchet/tasks) or point env.dataset at a JSONL/Parquet file`));
      tasksByEnv.push(undefined);
      continue;
    }
    let tasks: Task[];
    try {
      tasks = (await loadTasks(file)).tasks;
    } catch (err) {
      if (err instanceof TaskLoadError) {
        const shown = err.problems.slice(0, 10).map((p) => `  ${formatProblem(p)}`).join('\n');
        lines.push(fail('datasets', `env.${i}.dataset: ${err.problems.length} bad rows in ${file}:\n${shown}${err.problems.length > 10 ? `\n  ... and ${err.problems.length - 10} more` : ''}`));
      } else {
        lines.push(fail('datasets', `env.${i}.dataset: ${file}: ${(err as Error).message}`));
      }
      tasksByEnv.push(undefined);
      continue;
    }
    tasksByEnv.push(tasks);
    if (tasks.length === 0) {
      lines.push(fail('datasets', `env.${i}.dataset: ${file} has no tasks`));
      continue;
    }
    const env = envs[i];
    const problems: string[] = [];
    if (env && env.needsRepository !== false) {
      for (const t of tasks) {
        if (!t.source) problems.push(`task "${t.instance_id}": no source; "${env.id}" needs a repository per task`);
        else if (t.source.type === 'snapshot' && !existsSync(path.resolve(path.dirname(file), t.source.repo_path)) && !existsSync(path.resolve(taskSetDir, t.source.repo_path))) {
          problems.push(`task "${t.instance_id}": source.repo_path ${t.source.repo_path} does not exist`);
        }
        if (problems.length >= 5) break;
      }
    }
    if (problems.length > 0) {
      lines.push(fail('datasets', `env.${i}.dataset: ${file}:\n  ${problems.join('\n  ')}`));
    }
    if (env) {
      try {
        probeEnvironment(env, tasks[0]!, section.module ?? env.id);
      } catch (err) {
        lines.push(fail('environments', `env.${i}: ${err instanceof EnvironmentError ? err.message : (err as Error).message}`));
      }
    }
    if (problems.length === 0) lines.push(ok('datasets', `env.${i}.dataset: ${file}: ${tasks.length} tasks, no duplicates, within size limits`));
  }
  return { tasksByEnv, lines };
}
