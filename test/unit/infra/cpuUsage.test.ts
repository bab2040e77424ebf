import { busyIntervals, meanBusy, parseCpuSamples, suiteCpu } from '../../../infra/cpu-usage';

// cpu.tsv as infra/test.sh writes it: epoch ms, then /proc/stat's "cpu" counters (user nice system idle iowait irq softirq steal guest guest_nice).
const line = (t: number, c: number[]) => [t, ...c].join('\t');

describe('CPU busy fraction per suite (infra/cpu-usage.js)', () => {
  // Three samples 5 s apart. 0-5 s: 1000 jiffies, 200 idle + 50 iowait -> 0.75 busy. 5-10 s: 1000 jiffies, 900 idle -> 0.1 busy.
  const text = [
    line(10_000, [500, 100, 200, 900, 50, 20, 30, 0, 0, 0]),
    'not a sample',
    line(0, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
    line(5_000, [500, 100, 120, 200, 50, 20, 10, 0, 40, 0]),
  ].join('\n');

  test('parses the samples in time order, idle counting iowait, guest time not counted twice', () => {
    expect(parseCpuSamples(text)).toEqual([
      { t: 0, total: 0, idle: 0 },
      { t: 5_000, total: 1000, idle: 250 },
      { t: 10_000, total: 1800, idle: 950 },
    ]);
  });

  test('each interval between samples has its busy fraction', () => {
    const iv = busyIntervals(parseCpuSamples(text));
    expect(iv.map((i) => [i.from, i.to])).toEqual([[0, 5_000], [5_000, 10_000]]);
    expect(iv[0]!.busy).toBeCloseTo(0.75, 10);
    expect(iv[1]!.busy).toBeCloseTo(1 - 700 / 800, 10);
  });

  test('a suite gets the overlap-weighted mean; one outside the samples gets none', () => {
    const iv = busyIntervals(parseCpuSamples(text));
    const second = 1 - 700 / 800;
    expect(meanBusy(iv, 0, 5_000)).toBeCloseTo(0.75, 10);
    // 1.5 s in the first interval, 2.5 s in the second.
    expect(meanBusy(iv, 3_500, 7_500)).toBeCloseTo((1.5 * 0.75 + 2.5 * second) / 4, 10);
    expect(meanBusy(iv, 10_000, 20_000)).toBeUndefined();
    const rows = suiteCpu(parseCpuSamples(text), [{ suite: 'a.test.ts', start: 1_000, end: 2_000 }, { suite: 'b.test.ts', start: 20_000, end: 30_000 }]);
    expect(rows.map((r) => [r.suite, r.busy])).toEqual([['a.test.ts', 0.75], ['b.test.ts', undefined]]);
  });

  test('a counter that did not advance (same time, or a reset) yields no interval', () => {
    const s = parseCpuSamples([line(0, [1, 0, 0, 1, 0, 0, 0, 0, 0, 0]), line(0, [2, 0, 0, 2, 0, 0, 0, 0, 0, 0]), line(5_000, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0])].join('\n'));
    expect(busyIntervals(s)).toEqual([]);
  });
});
