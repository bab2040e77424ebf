/**
 * Harbor tasks (PyPI `harbor`, its TaskPaths / TaskConfig format) as Ratchet tasks. A task dir:
 *
 *     task.toml               [verifier] timeout_sec, [agent] timeout_sec, [environment] docker_image, workdir ...
 *     instruction.md          the task, given to the agent as is
 *     environment/Dockerfile  its environment (build context: environment/)
 *     tests/test.sh           the verifier; writes /logs/verifier/reward.txt (a number) or reward.json ({name: number})
 *
 * A dataset is a directory of such task dirs. Loading builds each environment image on this host with
 * no network (no registry is reachable), so a task whose Dockerfile needs anything from outside fails
 * with an error naming it: a base image that is not here, or a build step that needed the network.
 * Ratchet's sandbox runs the image with a read-only root, so the build adds /tests and /logs as links
 * into /tmp, and makes the work dir a git repository (its diff is the agent's change).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, promises as fs, statSync } from 'node:fs';
import * as path from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { Task } from './schema';

export class HarborTaskError extends Error {
  constructor(readonly taskDir: string, problem: string, fix: string) {
    super(`Harbor task ${taskDir}: ${problem}. Fix: ${fix}`);
    this.name = 'HarborTaskError';
  }
}

/** What a task row carries for the `harbor` environment's verifier (src/envs/harbor). */
export interface HarborRowInfo {
  task_dir: string;
  /** tests/ as relative path -> content; copied to /tests after the agent finishes, as Harbor does. */
  tests: Record<string, string>;
  verifier_timeout_s: number;
  agent_timeout_s?: number;
  workdir: string;
}

export interface HarborSpec {
  dir: string;
  name: string;
  instruction: string;
  dockerfile: string;
  /** FROM images the Dockerfile names (stage aliases excluded). */
  baseImages: string[];
  workdir: string;
  info: HarborRowInfo;
}

const MAX_TEST_BYTES = 2 * 1024 * 1024;

async function readTests(dir: string, root = dir, out: Record<string, string> = {}): Promise<Record<string, string>> {
  for (const e of await fs.readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) await readTests(p, root, out);
    else if (e.isFile()) out[path.relative(root, p)] = await fs.readFile(p, 'utf8');
  }
  return out;
}

/** FROM images and the last WORKDIR of a Dockerfile (enough to check what an offline build needs). */
export function dockerfileFacts(text: string): { baseImages: string[]; workdir?: string } {
  const stages = new Set<string>();
  const bases: string[] = [];
  let workdir: string | undefined;
  for (const raw of text.replace(/\\\r?\n/g, ' ').split(/\r?\n/)) {
    const line = raw.trim();
    const from = /^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?/i.exec(line);
    if (from) {
      if (!stages.has(from[1]!.toLowerCase()) && from[1]!.toLowerCase() !== 'scratch') bases.push(from[1]!);
      if (from[2]) stages.add(from[2].toLowerCase());
      continue;
    }
    const wd = /^WORKDIR\s+(\S+)/i.exec(line);
    if (wd) workdir = wd[1]!.startsWith('/') ? wd[1]! : path.posix.join(workdir ?? '/', wd[1]!);
  }
  return { baseImages: bases, ...(workdir ? { workdir } : {}) };
}

/** Reads and checks one task dir (no Docker): every missing or malformed part named. */
export async function readHarborTask(dir: string): Promise<HarborSpec> {
  const abs = path.resolve(dir);
  const need = (rel: string, what: string) => {
    if (!existsSync(path.join(abs, rel))) throw new HarborTaskError(abs, `${rel} is missing (${what})`, `add ${rel}; see https://harborframework.com task format, or docs/environments.md#harbor-tasks`);
  };
  need('task.toml', 'the task configuration');
  need('instruction.md', 'the instruction given to the agent');
  let cfg: Record<string, unknown>;
  try {
    cfg = parseToml(await fs.readFile(path.join(abs, 'task.toml'), 'utf8')) as Record<string, unknown>;
  } catch (err) {
    throw new HarborTaskError(abs, `task.toml is not valid TOML: ${(err as Error).message}`, 'correct task.toml');
  }
  if (Array.isArray(cfg.steps) && cfg.steps.length > 0) {
    throw new HarborTaskError(abs, 'task.toml has [[steps]] (a multi-step task), which Ratchet does not run', 'use single-step tasks');
  }
  const section = (k: string) => ((cfg[k] && typeof cfg[k] === 'object') ? cfg[k] : {}) as Record<string, unknown>;
  const env = section('environment');
  const verifier = section('verifier');
  const agent = section('agent');
  if (typeof env.docker_image === 'string' && env.docker_image !== '' && !existsSync(path.join(abs, 'environment', 'Dockerfile'))) {
    throw new HarborTaskError(abs, `its environment is the prebuilt image ${env.docker_image}, which must come from a registry, and none is reachable here`,
      'give the task an environment/Dockerfile that builds from an image on this host (e.g. ratchet-sandbox:latest)');
  }
  need('environment/Dockerfile', 'the environment image recipe');
  if (!existsSync(path.join(abs, 'tests', 'test.sh'))) need('tests/test.sh', 'the verifier that writes /logs/verifier/reward.txt');
  const dockerfile = await fs.readFile(path.join(abs, 'environment', 'Dockerfile'), 'utf8');
  const facts = dockerfileFacts(dockerfile);
  if (facts.baseImages.length === 0) throw new HarborTaskError(abs, 'environment/Dockerfile has no FROM image', 'start it with FROM <an image on this host>');
  const tests = await readTests(path.join(abs, 'tests'));
  const size = Object.values(tests).reduce((n, t) => n + t.length, 0);
  if (size > MAX_TEST_BYTES) throw new HarborTaskError(abs, `tests/ holds ${size} bytes, over ${MAX_TEST_BYTES}`, 'keep large fixtures in the environment image');
  const meta = section('task');
  const name = typeof meta.name === 'string' && meta.name !== '' ? meta.name : path.basename(abs);
  const workdir = (typeof env.workdir === 'string' && env.workdir.startsWith('/') ? env.workdir : undefined) ?? facts.workdir ?? '/app';
  if (workdir === '/' || workdir.startsWith('/work') || workdir.startsWith('/tmp')) {
    throw new HarborTaskError(abs, `its work dir ${workdir} is where Ratchet's sandbox mounts its writable areas (/work, /tmp) or the root`, 'use another WORKDIR (e.g. /app)');
  }
  const num = (v: unknown) => (typeof v === 'number' && v > 0 ? v : undefined);
  return {
    dir: abs, name, instruction: await fs.readFile(path.join(abs, 'instruction.md'), 'utf8'), dockerfile, baseImages: facts.baseImages, workdir,
    info: { task_dir: abs, tests, verifier_timeout_s: num(verifier.timeout_sec) ?? 600, ...(num(agent.timeout_sec) ? { agent_timeout_s: num(agent.timeout_sec)! } : {}), workdir },
  };
}

/** Task dirs under `p`: p itself when it holds task.toml, else its children that do (a dataset). */
export async function harborTaskDirs(p: string): Promise<string[]> {
  const abs = path.resolve(p);
  if (existsSync(path.join(abs, 'task.toml'))) return [abs];
  if (!existsSync(abs) || !statSync(abs).isDirectory()) throw new HarborTaskError(abs, 'is not a directory', 'name a Harbor task dir or a dataset dir of task dirs');
  const dirs = (await fs.readdir(abs, { withFileTypes: true })).filter((e) => e.isDirectory() && existsSync(path.join(abs, e.name, 'task.toml'))).map((e) => path.join(abs, e.name)).sort();
  if (dirs.length === 0) throw new HarborTaskError(abs, 'has no task.toml, nor sub-directories with one', 'point at a Harbor task dir (task.toml, instruction.md, environment/, tests/) or a dataset of them');
  return dirs;
}

function run(cmd: string, args: string[], stdin?: string): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve, reject) => {
    const c = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    c.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    c.stderr.on('data', (d: Buffer) => { err = (err + d.toString()).slice(-20_000); });
    c.on('error', reject);
    c.on('close', (code) => resolve({ code: code ?? 1, out, err }));
    c.stdin.end(stdin ?? '');
  });
}

/** Where the built image keeps the task's work dir; the sandbox copies it to /work/repo, and the work dir links there. */
export const HARBOR_SRC = '/opt/ratchet-harbor-src';

/**
 * What Ratchet appends to a task's Dockerfile. The sandbox's root is read-only and the agent works
 * in /work/repo (a copy of the image's repository), so: the work dir becomes a git repository, is
 * moved to HARBOR_SRC, and the work dir and Harbor's /tests and /logs become links into writable
 * places. test.sh's absolute paths (/app/..., /logs/verifier/reward.txt) then see the agent's work.
 */
export function ratchetDockerfile(spec: Pick<HarborSpec, 'dockerfile' | 'workdir'>): string {
  const wd = spec.workdir.replace(/'/g, '');
  return `${spec.dockerfile.trimEnd()}

# --- added by Ratchet (src/tasks/harbor.ts)
USER root
RUN mkdir -p '${wd}' && cd '${wd}' \\
 && (git rev-parse HEAD >/dev/null 2>&1 || (git init -q && git add -A && git -c user.email=harbor@ratchet -c user.name=harbor commit -q --allow-empty -m base)) \\
 && cd / && rm -rf ${HARBOR_SRC} && mv '${wd}' ${HARBOR_SRC} && chown -R 1000:1000 ${HARBOR_SRC} \\
 && ln -sfn /work/repo '${wd}' && ln -sfn /tmp/harbor/tests /tests && ln -sfn /tmp/harbor/logs /logs
WORKDIR /work
`;
}

/**
 * Builds the task's image offline (cached by content: the tag is a hash of the Dockerfile and the
 * environment/ files) and returns its Task row. Errors name the missing base image or failed step.
 */
export async function buildHarborTask(spec: HarborSpec, docker = 'docker'): Promise<Task> {
  for (const base of spec.baseImages) {
    const r = await run(docker, ['image', 'inspect', '--format', '{{.Id}}', base]);
    if (r.code !== 0) {
      throw new HarborTaskError(spec.dir, `environment/Dockerfile builds FROM ${base}, which is not on this host, and no image registry is reachable`,
        `docker load the image ${base} onto this host, or base the task on one that is here (ratchet-sandbox:latest has bash, git and python3)`);
    }
  }
  const dockerfile = ratchetDockerfile(spec);
  const h = createHash('sha256').update(dockerfile);
  const ctx = path.join(spec.dir, 'environment');
  for (const f of (await fs.readdir(ctx, { recursive: true, withFileTypes: true })).filter((e) => e.isFile()).map((e) => path.join(e.parentPath, e.name)).sort()) {
    h.update(path.relative(ctx, f)).update(await fs.readFile(f));
  }
  const tag = `ratchet-harbor/${spec.name.toLowerCase().replace(/[^a-z0-9._-]+/g, '-').slice(0, 100)}:${h.digest('hex').slice(0, 16)}`;
  if ((await run(docker, ['image', 'inspect', tag])).code !== 0) {
    const b = await run(docker, ['build', '--network', 'none', '-q', '-t', tag, '-f', '-', ctx], dockerfile);
    if (b.code !== 0) {
      const tail = b.err.trim().split('\n').slice(-6).join(' / ');
      throw new HarborTaskError(spec.dir, `its environment image did not build offline (no network here): ${tail}`,
        'make every build step work without the network (no apt-get/pip/curl downloads): put what it needs into environment/, or into a base image on this host');
    }
  }
  const head = await run(docker, ['run', '--rm', '--network', 'none', '--entrypoint', 'git', tag, '-c', `safe.directory=${HARBOR_SRC}`, '-C', HARBOR_SRC, 'rev-parse', 'HEAD']);
  if (head.code !== 0) throw new HarborTaskError(spec.dir, `the built image has no git repository of ${spec.workdir}: ${head.err.trim()}`, 'base the environment on an image with git');
  return Task.parse({
    instance_id: spec.name,
    repo: `harbor/${spec.name}`,
    base_commit: head.out.trim(),
    problem_statement: spec.instruction,
    patch: '',
    FAIL_TO_PASS: [],
    source: { type: 'image', image: tag, repo_dir: HARBOR_SRC },
    harbor: spec.info,
  });
}

/** A Harbor task dir or dataset, as Task rows (images built on this host). */
export async function loadHarborTasks(p: string, docker = 'docker'): Promise<Task[]> {
  const out: Task[] = [];
  for (const d of await harborTaskDirs(p)) out.push(await buildHarborTask(await readHarborTask(d), docker));
  return out;
}
