import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import type { StackLayout } from '../layout';
import { paths } from '../shared/paths';

/**
 * The GPU layout `ratchet up --config` brought up (src/layout), kept in the run dir so that a later
 * `ratchet up`, `ratchet down`, the supervisor and `ratchet doctor` act on the same processes. No file:
 * the CPU stack.
 */
export type GpuLayout = Extract<StackLayout, { kind: 'gpu' }>;
export interface SavedLayout { configPath: string; layout: GpuLayout }

export const layoutFile = (): string => path.join(paths.run(), 'layout.json');

export function savedLayout(): SavedLayout | undefined {
  if (!existsSync(layoutFile())) return undefined;
  try {
    const saved = JSON.parse(readFileSync(layoutFile(), 'utf8')) as SavedLayout;
    return saved.layout?.kind === 'gpu' ? saved : undefined;
  } catch (err) {
    throw new Error(`${layoutFile()} does not parse (${(err as Error).message}). Fix: ratchet up --config <config> writes it again, or remove it for the CPU stack`);
  }
}

/** A GPU layout is saved; a CPU layout removes the file (the stack is the CPU one again). */
export function saveLayout(configPath: string, layout: StackLayout): void {
  if (layout.kind !== 'gpu') {
    rmSync(layoutFile(), { force: true });
    return;
  }
  mkdirSync(paths.run(), { recursive: true });
  writeFileSync(`${layoutFile()}.tmp`, JSON.stringify({ configPath, layout } satisfies SavedLayout, null, 2));
  renameSync(`${layoutFile()}.tmp`, layoutFile());
}
