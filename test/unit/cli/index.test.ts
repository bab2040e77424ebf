import { mkdtempSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { main } from '../../../src/cli/index';
import { EXIT } from '../../../src/cli/exit';
import { parseDuration } from '../../../src/cli/term';
import { scheduleIdFor } from '../../../src/cli/schedule';
import { defaultRunId } from '../../../src/cli/train';
import { syntheticStepRecords } from '../../../src/report/synthetic';

describe('ratchet CLI (no stack needed)', () => {
  let out: string[];
  let err: string[];
  beforeEach(() => {
    out = []; err = [];
    jest.spyOn(process.stdout, 'write').mockImplementation((s) => { out.push(String(s)); return true; });
    jest.spyOn(process.stderr, 'write').mockImplementation((s) => { err.push(String(s)); return true; });
    jest.spyOn(console, 'log').mockImplementation((...a) => { out.push(a.join(' ')); });
    jest.spyOn(console, 'error').mockImplementation((...a) => { err.push(a.join(' ')); });
    process.exitCode = undefined;
  });
  afterEach(() => { jest.restoreAllMocks(); process.exitCode = undefined; });

  it('--help on every command exits 0 with examples', async () => {
    for (const cmd of ['up', 'down', 'doctor', 'check', 'train', 'sft', 'status', 'pause', 'resume', 'stop', 'eval', 'report', 'schedule', 'schedule eval']) {
      out = [];
      expect(await main([...cmd.split(' '), '--help'])).toBe(EXIT.ok);
      expect(out.join('')).toMatch(/Examples:|Usage:/);
    }
    expect(await main(['--help'])).toBe(EXIT.ok);
    expect(out.join('')).toContain('Exit codes:');
  });

  it('usage errors exit 2', async () => {
    expect(await main(['bogus'])).toBe(EXIT.usage);
    expect(await main(['report'])).toBe(EXIT.usage);
    expect(await main(['schedule', 'eval', '--every', '30m'])).toBe(EXIT.usage); // --run missing
  });

  it('report: unknown run exits 3, a run with no finished step exits 6, a run with steps writes a file', async () => {
    const root = mkdtempSync(path.join(tmpdir(), 'ratchet-cli-'));
    process.env.RATCHET_ARTIFACTS = root;
    try {
      expect(await main(['report', 'nope'])).toBe(EXIT.notFound);
      expect(err.join('')).toMatch(/run "nope" not found/);
      mkdirSync(path.join(root, 'runs', 'empty'), { recursive: true });
      expect(await main(['report', 'empty'])).toBe(EXIT.notReady);
      expect(err.join('')).toMatch(/no finished step yet/);
      mkdirSync(path.join(root, 'runs', 'ok'), { recursive: true });
      writeFileSync(path.join(root, 'runs', 'ok', 'metrics.jsonl'), syntheticStepRecords(3).map((r) => JSON.stringify(r)).join('\n'));
      expect(await main(['report', 'ok', '--out', path.join(root, 'r.html')])).toBe(EXIT.ok);
      expect(out.join('')).toContain('r.html');
    } finally {
      delete process.env.RATCHET_ARTIFACTS;
    }
    // Each report first asks Temporal for the run's memo; with no server up that is the CLI's 3 s connect timeout, three times.
  }, 30_000);

  it('train with an invalid config exits 5 naming the key', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-cfg-'));
    const file = path.join(dir, 'bad.toml');
    writeFileSync(file, '[orchestrator]\nbatch_size = -1\n');
    expect(await main(['train', file])).toBe(EXIT.invalidInput);
    expect(err.join('')).toMatch(/orchestrator\.batch_size/);
  });

  it('sft with a config without [sft] exits 5 with the fix, before connecting anywhere', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-cfg-'));
    const file = path.join(dir, 'rl.toml');
    writeFileSync(file, '[[env]]\nid = "swe-grep"\n');
    expect(await main(['sft', file, '--no-check'])).toBe(EXIT.invalidInput);
    expect(err.join('')).toMatch(/ratchet sft needs an \[sft\] section .*Fix: add it/);
    out = [];
    expect(await main(['sft', '--help'])).toBe(EXIT.ok);
    expect(out.join('')).toContain('temporal workflow start --type SftRun');
  });

  it('helpers', () => {
    expect(parseDuration('30m')).toBe(1_800_000);
    expect(parseDuration('1.5h')).toBe(5_400_000);
    expect(parseDuration('soon')).toBeUndefined();
    expect(scheduleIdFor('smoke-1', '/data/x.jsonl')).toBe('eval-smoke-1-data_x.jsonl');
    expect(defaultRunId('smoke', new Date('2025-02-03T04:05:06.789Z'))).toBe('smoke-20250203-040506');
  });
});
