import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, promises as fs, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Completion, CompletionRequest, ModelClient } from '../../src/agent/model';
import type { AcquireOptions, ExecOptions, ExecResult, Sandbox, SandboxManager } from '../../src/sandbox/interface';
import { REPO_DIR } from '../../src/sandbox/interface';

/**
 * Unit-test doubles. HostDirSandbox runs commands with the host's bash in a temp
 * git work tree mapped to /work/repo: enough to test tools against real files,
 * never used with a real model. The real sandbox is Docker (integration tests).
 */
export class HostDirSandbox implements Sandbox {
  released = false;
  constructor(readonly root: string, readonly baseCommit: string) {}

  private map(p: string): string {
    return p.startsWith(REPO_DIR) ? path.join(this.root, p.slice(REPO_DIR.length)) : p.startsWith('/tmp/') ? path.join(this.root, '.tmp', p.slice(5)) : path.join(this.root, p);
  }

  exec(command: string, opts: ExecOptions = {}): Promise<ExecResult> {
    const started = Date.now();
    return new Promise((resolve) => {
      const cmd = command.replace(/\/tmp\//g, `${this.root}/.tmp/`);
      const child = spawn('bash', ['-c', cmd], { cwd: this.map(opts.cwd ?? REPO_DIR), timeout: opts.timeoutMs ?? 20_000 });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => { stdout += d.toString(); });
      child.stderr.on('data', (d: Buffer) => { stderr += d.toString(); });
      if (opts.stdin !== undefined) child.stdin.end(opts.stdin); else child.stdin.end();
      child.on('close', (code, sig) => resolve({ exitCode: code, stdout, stderr, timedOut: sig !== null, truncated: false, durationMs: Date.now() - started }));
    });
  }

  async writeFile(p: string, content: string): Promise<void> {
    await fs.mkdir(path.dirname(this.map(p)), { recursive: true });
    await fs.writeFile(this.map(p), content);
  }

  readFile(p: string): Promise<string> {
    return fs.readFile(this.map(p), 'utf8');
  }

  async diff(): Promise<string> {
    return execFileSync('bash', ['-c', 'git add -A -- . ":!.tmp" >/dev/null && git diff --cached "$0"', this.baseCommit], { cwd: this.root }).toString();
  }

  async release(): Promise<void> {
    this.released = true;
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** A git repo in a temp dir with the given files committed. */
export function makeRepo(files: Record<string, string>): { root: string; commit: string } {
  const root = mkdtempSync(path.join(os.tmpdir(), 'ratchet-fake-repo-'));
  for (const [name, content] of Object.entries(files)) {
    const file = path.join(root, name);
    execFileSync('mkdir', ['-p', path.dirname(file)]);
    writeFileSync(file, content);
  }
  const git = (...args: string[]) => execFileSync('git', ['-c', 'user.email=t@t', '-c', 'user.name=t', ...args], { cwd: root }).toString().trim();
  git('init', '-q');
  git('add', '-A');
  git('commit', '-qm', 'base');
  return { root, commit: git('rev-parse', 'HEAD') };
}

export class FakeSandboxManager implements SandboxManager {
  acquired: AcquireOptions[] = [];
  sandboxes: HostDirSandbox[] = [];
  constructor(private readonly files: Record<string, string>) {}
  async acquire(opts: AcquireOptions): Promise<Sandbox> {
    this.acquired.push(opts);
    const { root, commit } = makeRepo(this.files);
    const sb = new HostDirSandbox(root, commit);
    this.sandboxes.push(sb);
    return sb;
  }
}

export type ScriptedTurn = Partial<Completion> | ((req: CompletionRequest) => Partial<Completion>);

/** A model that plays back turns; each gets token ids and logprobs like vLLM's. */
export class ScriptedModel implements ModelClient {
  requests: CompletionRequest[] = [];
  constructor(private readonly turns: ScriptedTurn[]) {}
  async complete(req: CompletionRequest): Promise<Completion> {
    this.requests.push(req);
    const next = this.turns[this.requests.length - 1];
    const t = typeof next === 'function' ? next(req) : next ?? { content: 'I am done.' };
    const n = t.completion_tokens ?? 5;
    return {
      content: t.content ?? null,
      tool_calls: t.tool_calls ?? [],
      finish_reason: t.finish_reason ?? ((t.tool_calls?.length ?? 0) > 0 ? 'tool_calls' : 'stop'),
      prompt_token_ids: [1, 2, 3],
      completion_token_ids: Array.from({ length: n }, (_, i) => 100 + i),
      completion_logprobs: Array.from({ length: n }, () => -0.5),
      prompt_tokens: 3,
      completion_tokens: n,
    };
  }
}

export function call(name: string, args: unknown, id = `call_${name}_${Math.random().toString(36).slice(2, 7)}`) {
  return { id, type: 'function' as const, function: { name, arguments: typeof args === 'string' ? args : JSON.stringify(args) } };
}

/** A tiny Python project with one bug (add subtracts): test_add fails, test_sub passes. */
export const CALC_FILES = {
  'pkg/__init__.py': '',
  'pkg/calc.py': 'def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n',
  'tests/test_calc.py': 'from pkg.calc import add, sub\n\n\ndef test_add():\n    x = add(2, 3)\n    assert x == 5\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n',
};
