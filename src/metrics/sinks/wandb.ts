import { execFile } from 'node:child_process';
import * as path from 'node:path';
import { paths, REPO_ROOT } from '../../shared/paths';

/** The sink script (Python: wandb is a Python package) and the venv infra/metrics-env.sh makes for it. */
export const WANDB_SINK = path.join(REPO_ROOT, 'src', 'metrics', 'sinks', 'wandb_sink.py');
export const wandbPython = (): string => process.env.RATCHET_WANDB_PYTHON ?? path.join(paths.venv('metrics'), 'bin', 'python');

export interface WandbStep {
  project: string;
  entity?: string;
  mode: 'offline' | 'online';
  dir: string;
  runId: string;
  step: number;
  scalars: Record<string, number>;
}

/** Logs one step through the Python sink; resolves with the W&B run directory it wrote. */
export function writeWandbStep(s: WandbStep, timeoutMs = 120_000): Promise<string> {
  const req = { project: s.project, entity: s.entity, mode: s.mode, dir: s.dir, run_id: s.runId, step: s.step, scalars: s.scalars };
  return new Promise((resolve, reject) => {
    const child = execFile(wandbPython(), [WANDB_SINK], { timeout: timeoutMs, env: { ...process.env, WANDB_DIR: s.dir } }, (err, stdout, stderr) => {
      if (err) {
        reject(new Error(`W&B sink failed (${wandbPython()}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'not installed; run bash infra/metrics-env.sh' : err.message}): ${stderr.trim().slice(-500)}`));
        return;
      }
      resolve(stdout.trim().split('\n').pop() ?? '');
    });
    child.stdin!.end(JSON.stringify(req));
  });
}
