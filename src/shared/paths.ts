import * as path from 'node:path';

/** Repository root: src/shared -> ../.. (also right for dist/shared). */
export const REPO_ROOT = path.resolve(__dirname, '..', '..');

/** Where the local stack keeps its state: venvs, logs, models, artifacts, tasks. */
export function ratchetHome(): string {
  return process.env.RATCHET_HOME ?? path.join(REPO_ROOT, '.ratchet');
}

export const paths = {
  home: () => ratchetHome(),
  logs: () => path.join(ratchetHome(), 'logs'),
  run: () => path.join(ratchetHome(), 'run'),
  venv: (name: string) => path.join(ratchetHome(), 'venvs', name),
  models: () => path.join(ratchetHome(), 'models'),
  defaultModel: () => path.join(ratchetHome(), 'models', 'SmolLM2-135M-Instruct'),
  artifacts: () => process.env.RATCHET_ARTIFACTS ?? path.join(ratchetHome(), 'artifacts'),
  tasks: () => process.env.RATCHET_TASKS ?? path.join(ratchetHome(), 'tasks'),
  temporalBin: () => path.join(ratchetHome(), 'venvs', 'tools', 'bin', 'temporal'),
};

export const TASK_QUEUES = {
  main: 'ratchet',
  rollout: 'ratchet-rollout',
  trainerAnnounce: 'ratchet-trainer',
} as const;

export const DEFAULTS = {
  temporalAddress: process.env.TEMPORAL_ADDRESS ?? '127.0.0.1:7233',
  temporalNamespace: process.env.TEMPORAL_NAMESPACE ?? 'default',
  temporalUi: 'http://127.0.0.1:8233',
  inferenceUrl: process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1',
  servedModel: 'smollm2-135m',
} as const;

/**
 * A path from a run config, made absolute: relative paths resolve against the
 * repository root, except `.ratchet/...`, which means the state dir wherever
 * RATCHET_HOME puts it (the same place when it is unset).
 */
export function resolveConfigPath(p: string): string {
  if (path.isAbsolute(p)) return p;
  const norm = path.normalize(p);
  if (norm === '.ratchet' || norm.startsWith(`.ratchet${path.sep}`)) return path.join(ratchetHome(), norm.slice('.ratchet'.length));
  return path.join(REPO_ROOT, p);
}
