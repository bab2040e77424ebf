import type { ExecResult, Sandbox } from '../../../src/sandbox/interface';
import { isSandboxLost, isSandboxUnreachable } from '../../../src/rollouts/errors';

describe('isSandboxUnreachable: Docker saying the container or dockerd is gone', () => {
  test.each([
    ['(HTTP code 404) no such container - No such container: ratchet-sbx-1', true],
    ['(HTTP code 409) container stopped/paused - Container 3f1c is not running', true],
    ['Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?', true],
    ['connect ENOENT /var/run/docker.sock', true],
    ['socket hang up', true],
    ['sandbox ratchet-sbx-1: diff(HEAD) exited with 128: fatal: not a git repository', false],
    ['ToolError: file not found', false],
  ])('%s -> %s', (message, want) => {
    expect(isSandboxUnreachable(new Error(message))).toBe(want);
  });
  test('socket error codes count only with a Docker-ish message', () => {
    expect(isSandboxUnreachable(Object.assign(new Error('connect ECONNREFUSED /var/run/docker.sock'), { code: 'ECONNREFUSED' }))).toBe(true);
    expect(isSandboxUnreachable(Object.assign(new Error('open /work/repo/x: no such file'), { code: 'ENOENT' }))).toBe(false);
  });
});

describe('isSandboxLost: after a failed call, a probe tells a dead container from a broken repository', () => {
  const ok: ExecResult = { exitCode: 0, stdout: '', stderr: '', timedOut: false, truncated: false, durationMs: 1 };
  const sandbox = (exec: Sandbox['exec']): Sandbox => ({
    exec, writeFile: async () => undefined, readFile: async () => '', diff: async () => '', release: async () => undefined,
  });
  const broken = new Error('sandbox ratchet-sbx-1: diff(HEAD) exited with 128: fatal: not a git repository');

  test('an error that already says so needs no probe', async () => {
    const exec = jest.fn(async () => ok);
    expect(await isSandboxLost(new Error('No such container: ratchet-sbx-1'), sandbox(exec))).toBe(true);
    expect(exec).not.toHaveBeenCalled();
  });
  test('a container that still runs commands is not lost (the agent broke its repository)', async () => {
    const exec = jest.fn(async () => ok);
    expect(await isSandboxLost(broken, sandbox(exec))).toBe(false);
    expect(exec).toHaveBeenCalledWith('true', expect.objectContaining({ cwd: '/' }));
  });
  test('a probe Docker refuses because the container is gone: lost', async () => {
    expect(await isSandboxLost(broken, sandbox(async () => { throw new Error('Container 3f1c is not running'); }))).toBe(true);
  });
  test('a probe that fails for another reason (the agent exhausted its pids): not lost', async () => {
    expect(await isSandboxLost(broken, sandbox(async () => { throw new Error('OCI runtime exec failed: resource temporarily unavailable'); }))).toBe(false);
  });
});
