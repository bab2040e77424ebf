import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { ZodError } from 'zod';
import { REPO_ROOT } from '../shared/paths';
import { crossCheckRunConfig, crossFieldIssues, RunConfig } from './schema';

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** Formats zod issues as "file: key.path: problem" lines a person can act on. */
export function describeZodError(file: string, err: ZodError): string {
  return err.issues
    .map((i) => `${file}: ${i.path.length ? i.path.join('.') : '(top level)'}: ${i.message}`)
    .join('\n');
}

export function parseRunConfig(text: string, file: string): RunConfig {
  let raw: unknown;
  try {
    raw = parseToml(text);
  } catch (err) {
    throw new ConfigError(`${file}: not valid TOML: ${(err as Error).message}`);
  }
  const parsed = RunConfig.safeParse(raw);
  if (!parsed.success) {
    throw new ConfigError(`invalid run config\n${describeZodError(file, parsed.error)}\nFix the keys above; configs/README.md lists every key.`);
  }
  const cross = crossFieldIssues(parsed.data);
  if (cross.length) {
    throw new ConfigError(`invalid run config\n${cross.map((i) => `${file}: ${i.path.join('.')}: ${i.message}`).join('\n')}\nFix the keys above; configs/README.md lists every key.`);
  }
  const conflicts = crossCheckRunConfig(raw, parsed.data);
  if (conflicts.length > 0) {
    throw new ConfigError(`invalid run config\n${conflicts.map((c) => `${file}: ${c}`).join('\n')}\nconfigs/README.md explains how these settings combine.`);
  }
  return parsed.data;
}

export async function loadRunConfig(configPath: string): Promise<{ config: RunConfig; absPath: string; text: string }> {
  const absPath = path.isAbsolute(configPath) ? configPath : path.join(REPO_ROOT, configPath);
  let text: string;
  try {
    text = await fs.readFile(absPath, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read run config ${absPath}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}. ` +
      'Fix: pass a path like configs/swe-grep/smoke.toml, relative to the repository root or absolute.');
  }
  return { config: parseRunConfig(text, configPath), absPath, text };
}
