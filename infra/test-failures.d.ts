// Types of infra/test-failures.js (plain JS: summarize-tests.js runs under node without a build) for the unit test.
export interface TestFailure { name: string; message: string }
export function firstLines(text: string | undefined, n?: number): string;
export function jestFailures(report: unknown, relativeTo?: string): TestFailure[];
export function pytestFailures(xml: string): TestFailure[];
export function stackEvents(logText: string | undefined, report: unknown, relativeTo?: string, sinceMs?: number): string[];
