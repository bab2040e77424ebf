// Types of infra/cpu-usage.js (plain JS: summarize-tests.js runs under node without a build) for the unit test.
export interface CpuSample { t: number; total: number; idle: number }
export interface BusyInterval { from: number; to: number; busy: number }
export interface SuiteSpan { suite: string; start: number; end: number }
export function parseCpuSamples(text: string): CpuSample[];
export function busyIntervals(samples: CpuSample[]): BusyInterval[];
export function meanBusy(intervals: BusyInterval[], start: number, end: number): number | undefined;
export function suiteCpu<S extends SuiteSpan>(samples: CpuSample[], suites: S[]): (S & { busy: number | undefined })[];
