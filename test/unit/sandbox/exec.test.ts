import { PassThrough } from 'node:stream';
import type Docker from 'dockerode';
import pino from 'pino';
import { AbortError, runExec } from '../../../src/sandbox/exec';

const log = pino({ level: 'silent' });

/** A container whose exec streams never end: what a process holding stdout past its timeout looks like. */
function hangingContainer() {
  const cmds: string[][] = [];
  const streams: PassThrough[] = [];
  const container = {
    exec: async (opts: { Cmd: string[] }) => {
      cmds.push(opts.Cmd);
      return {
        start: async () => {
          const s = new PassThrough();
          streams.push(s);
          return s;
        },
        inspect: async () => ({ Running: true, ExitCode: null }),
      };
    },
  } as unknown as Docker.Container;
  const docker = { modem: { demuxStream: () => undefined } } as unknown as Docker;
  return { container, docker, cmds, streams };
}

describe('runExec host-side deadline', () => {
  it('gives up after timeout + slack, reports a timeout and kills the agent processes', async () => {
    const f = hangingContainer();
    const t0 = Date.now();
    const res = await runExec({ docker: f.docker, container: f.container, argv: ['sleep', '1000'], timeoutMs: 50, hostSlackMs: 50, cwd: '/work', outputLimitBytes: 100, log });
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(res).toMatchObject({ exitCode: null, timedOut: true, truncated: false });
    expect(f.streams[0]!.destroyed).toBe(true);
    await new Promise((r) => setImmediate(r));
    expect(f.cmds[1]?.[2]).toContain('kill -$sig "$p"'); // the kill-all script, sparing PID 1 and its keeper
  });

  it('rejects with AbortError when the signal fires mid-exec', async () => {
    const f = hangingContainer();
    const ctl = new AbortController();
    setTimeout(() => ctl.abort(), 30);
    await expect(
      runExec({ docker: f.docker, container: f.container, argv: ['sleep', '1000'], timeoutMs: 60_000, cwd: '/work', outputLimitBytes: 100, signal: ctl.signal, log }),
    ).rejects.toBeInstanceOf(AbortError);
    expect(f.streams[0]!.destroyed).toBe(true);
  });
});
