import { stepLine } from '../../../src/cli/follow';
import { ProgressBar } from '../../../src/cli/term';
import { syntheticReportSteps } from '../../../src/report/synthetic';

/** A stand-in for process.stderr that records what was written. */
function fakeStream(isTTY: boolean): { stream: NodeJS.WriteStream; written: string[] } {
  const written: string[] = [];
  const stream = { isTTY, write: (s: string) => { written.push(s); return true; } } as unknown as NodeJS.WriteStream;
  return { stream, written };
}

describe('ratchet status output', () => {
  const savedNoColor = process.env.NO_COLOR;
  beforeAll(() => { process.env.NO_COLOR = '1'; });
  afterAll(() => { if (savedNoColor === undefined) delete process.env.NO_COLOR; else process.env.NO_COLOR = savedNoColor; });

  it('redraws one bar in place on a terminal, with the share, the counts and the phase', () => {
    const { stream, written } = fakeStream(true);
    const bar = new ProgressBar(stream, 10);
    bar.update(3, 8, 'step 2/3 · rollouts · running');
    bar.update(8, 8, 'step 2/3 · building-batch · running');
    expect(written).toHaveLength(2);
    expect(written[0]).toBe(`\r\x1b[2K${'█'.repeat(4)}${'░'.repeat(6)}  38% 3/8 step 2/3 · rollouts · running`);
    expect(written[1]).toContain(`${'█'.repeat(10)} 100% 8/8 step 2/3 · building-batch`);
    bar.clear();
    expect(written[2]).toBe('\r\x1b[2K');
  });

  it('prints a plain line per ~10% on a pipe, never carriage returns', () => {
    const { stream, written } = fakeStream(false);
    const bar = new ProgressBar(stream);
    for (let done = 0; done <= 64; done++) bar.update(done, 64, 'step 0/3 · rollouts');
    expect(written).toHaveLength(11); // 0%, 10% ... 100%
    expect(written.join('')).not.toContain('\r');
    expect(written.at(-1)).toBe('step 0/3 · rollouts: 64/64\n');
    bar.clear();
    expect(written).toHaveLength(11);
  });

  it('summarises a finished step in one line: version, reward with spread, components, episodes, wall time', () => {
    const [r] = syntheticReportSteps(1);
    const line = stepLine(r!);
    expect(line).not.toContain('\n');
    expect(line).toMatch(new RegExp(`^step +0 +v${r!.policy_version} +reward +${r!.reward.mean.toFixed(3).replace('.', '\\.')} ±${r!.reward.std.toFixed(3).replace('.', '\\.')}`));
    for (const [name, value] of Object.entries(r!.components)) expect(line).toContain(`${name} ${value.toFixed(2)}`);
    expect(line).toMatch(/ \d+ eps +[\d.]+(ms|s|m)$/);
  });
});
