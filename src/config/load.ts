import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { ZodError } from 'zod';
import { REPO_ROOT } from '../shared/paths';
import { crossCheck } from './crossChecks';
import { BUILTIN_ENV_IDS, crossCheckRunConfig, crossFieldIssues, RunConfig } from './schema';

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
  const secrets = credentialKeys(raw);
  if (secrets.length) {
    throw new ConfigError(`${file}: artifacts.${secrets[0]}: credentials never go in the run config (it is stored with the run and shown in its history). ` +
      'Fix: remove it and give every host AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in its environment.');
  }
  if ((raw as { model?: { init?: unknown } } | undefined)?.model?.init !== undefined) {
    // The resolved warm start is the run's own record (openRun writes it), never a user's setting.
    throw new ConfigError(`${file}: model.init: is written by the run itself when it opens (init_from, resolved and verified). ` +
      'Fix: remove it and set model.init_from = "<run>" or "<run>@<step>"');
  }
  const parsed = RunConfig.safeParse(raw);
  if (!parsed.success) {
    throw new ConfigError(`invalid run config\n${describeZodError(file, parsed.error)}\nFix the keys above; configs/README.md lists every key.`);
  }
  const issues = [
    ...unknownEnvIssues(parsed.data),
    ...crossFieldIssues(parsed.data).map((i) => ({ key: i.path.join('.'), message: i.message })),
    ...crossCheck(parsed.data),
  ];
  if (issues.length > 0) {
    throw new ConfigError(`invalid run config\n${issues.map((i) => `${file}: ${i.key}: ${i.message}`).join('\n')}\nFix the keys above; configs/README.md lists every key.`);
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

/** Keys of [artifacts] that look like credentials: refused with their own message, not "unrecognized key". */
function credentialKeys(raw: unknown): string[] {
  const a = (raw as { artifacts?: unknown } | undefined)?.artifacts;
  if (!a || typeof a !== 'object') return [];
  return Object.keys(a).filter((k) => /key|secret|token|password|credential/i.test(k));
}

/** An id that is neither built in nor loaded from a module names nothing. */
function unknownEnvIssues(c: RunConfig): { key: string; message: string }[] {
  return c.env.flatMap((e, i) => (e.module !== undefined || (BUILTIN_ENV_IDS as readonly string[]).includes(e.id) ? [] : [{
    key: `env.${i}.id`,
    message: `unknown environment "${e.id}"; built in: ${BUILTIN_ENV_IDS.join(', ')}. ` +
      'Fix: use one of those, or add env.module = "<path or package>" for your own (docs/environments.md)',
  }]));
}
