import { ConfigError, loadRunConfig } from '../config/load';
import type { RunConfig } from '../config/schema';
import { EnvironmentError, resolveEnvSections } from '../envs/load';
import { paths, resolveConfigPath } from '../shared/paths';
import { checkDatasets, checkEnvironments } from './data';
import { checkHostLimits, hostCapacity, type HostCapacity } from './host';
import { checkGpuMemory } from './gpu';
import { checkModel } from './model';
import { checkSampling } from './sampling';
import { checkSft } from './sft';
import { checkEval } from './eval';
import { checkStack, type StackTarget } from './stack';
import { fail, ok, type CheckLine } from './types';

export type { CheckLine } from './types';

export interface CheckOptions extends StackTarget {
  /** Skip the stack section (Temporal, inference, dockerd): for configs written on another machine. */
  stack?: boolean;
  taskSetDir?: string;
  /** Tests give a host of their own; default: docker info, else this machine. */
  host?: () => Promise<HostCapacity>;
}

export interface CheckReport {
  lines: CheckLine[];
  config?: RunConfig;
  ok: boolean;
}

/**
 * Everything a run will need, checked without starting anything: the config
 * (bounds, then settings together), the environments, every dataset row, the
 * model directory and its chat template, the in-run eval task set, the host's limits for sandboxes, and
 * whether the stack answers. `ratchet check` prints it; `ratchet train` runs it first.
 */
export async function runChecks(configPath: string, opts: CheckOptions = {}): Promise<CheckReport> {
  const lines: CheckLine[] = [];
  let config: RunConfig;
  try {
    ({ config } = await loadRunConfig(configPath));
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    for (const l of err.message.split('\n')) if (l.startsWith(configPath) || l.startsWith('cannot read')) lines.push(fail('config', l));
    if (lines.length === 0) lines.push(fail('config', err.message));
    return { lines, ok: false };
  }
  lines.push(ok('config', `${configPath}: every key within bounds and consistent`));
  config.model.path = resolveConfigPath(config.model.path);
  try {
    resolveEnvSections(config.env);
  } catch (err) {
    if (!(err instanceof EnvironmentError)) throw err;
    lines.push(fail('environments', err.message));
    return { lines, config, ok: false };
  }

  const { envs, lines: envLines } = checkEnvironments(config);
  lines.push(...envLines);
  const { tasksByEnv, lines: dataLines } = await checkDatasets(config, envs, opts.taskSetDir ?? paths.tasks());
  lines.push(...dataLines);
  lines.push(...checkModel(config, envs, tasksByEnv));
  lines.push(...checkSampling(config));
  lines.push(...checkSft(config));
  lines.push(...await checkEval(config));
  lines.push(...checkGpuMemory(config));
  lines.push(...checkHostLimits(config, await (opts.host ?? hostCapacity)()));
  if (opts.stack !== false) lines.push(...await checkStack(config, opts));
  return { lines, config, ok: lines.every((l) => l.level !== 'fail') };
}
