import { ConfigError, loadRunConfig } from '../config/load';
import type { RunConfig } from '../config/schema';
import { EnvironmentError, resolveEnvSections } from '../envs/load';
import { LayoutError, stackLayout } from '../layout';
import { isAlive, readPid } from '../shared/pidFiles';
import { paths, ratchetHome, REPO_ROOT, resolveConfigPath } from '../shared/paths';
import { checkDatasets, checkEnvironments } from './data';
import { checkHostLimits, hostCapacity, type HostCapacity } from './host';
import { checkFullWeightsRoute, checkWeightSync } from './weightSync';
import { checkGpuMemory } from './gpu';
import { gpuHostLines, queryGpuHost, vllmCudaBuild } from './gpuHost';
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
  /**
   * On a GPU layout, check this host's GPUs (nvidia-smi), vLLM's CUDA build and NCCL's path. Default: with
   * the stack section (not --offline); a config whose vLLM replicas are on other hosts skips it.
   */
  gpuHost?: boolean;
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
  lines.push(...checkWeightSync(config));
  lines.push(...checkSft(config));
  lines.push(...await checkEval(config));
  lines.push(...checkGpuMemory(config));
  if (opts.gpuHost ?? opts.stack !== false) lines.push(...await checkGpuHost(config));
  lines.push(...checkHostLimits(config, await (opts.host ?? hostCapacity)()));
  if (opts.stack !== false) lines.push(...await checkStack(config, opts), ...await checkFullWeightsRoute(config));
  return { lines, config, ok: lines.every((l) => l.level !== 'fail') };
}

/** The GPU host lines for a config that runs on this host's GPUs (src/layout); none for the CPU stack. */
async function checkGpuHost(config: RunConfig): Promise<CheckLine[]> {
  let layout;
  const lines: CheckLine[] = [];
  try {
    layout = stackLayout(config, { root: REPO_ROOT, home: ratchetHome() });
  } catch (err) {
    if (!(err instanceof LayoutError)) throw err;
    if (!config.inference.base_urls.some((u) => !/\/\/(127\.0\.0\.1|localhost)[:/]/.test(u))) return [fail('gpu', err.message)];
    // vLLM on other hosts: this host is the trainer's (ratchet up --config <config> --only trainer); its GPUs are checked for that.
    lines.push(ok('gpu', `inference.base_urls name other hosts: their GPUs are checked there; this host's for the trainer alone (${err.message.split('. Fix')[0]})`));
    try {
      layout = stackLayout(config, { root: REPO_ROOT, home: ratchetHome() }, { only: 'trainer' });
    } catch (e) {
      if (!(e instanceof LayoutError)) throw e;
      return [fail('gpu', e.message)];
    }
  }
  if (layout.kind !== 'gpu') return [];
  const host = await queryGpuHost().catch((err: Error) => ({ error: err.message }));
  const venv = paths.venv(layout.vllmVenv);
  const running = [...layout.inference, layout.trainer].some((p) => isAlive(readPid(p.name)));
  return [...lines, ...gpuHostLines(config, layout, host, await vllmCudaBuild(venv), venv, running)];
}
