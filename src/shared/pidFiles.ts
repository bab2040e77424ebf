/**
 * The local stack's pid files (one per service under .ratchet/run, written by src/stack/processes.ts)
 * and whether the process a pid names is alive: read by the stack, `ratchet check` and the soak.
 */
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { paths } from './paths';

export function pidFile(name: string): string {
  return path.join(paths.run(), `${name}.pid`);
}
export function readPid(name: string): number | undefined {
  try {
    const pid = Number(readFileSync(pidFile(name), 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

export function isAlive(pid: number | undefined): boolean {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
