import { shq } from './sandbox';

/** `<test_cmd> <extra> <ids>`: the task's pytest command with node ids appended, each quoted. */
export function pytestCommand(testCmd: string, ids: string[], extra: string[] = []): string {
  return [testCmd, '-p no:cacheprovider', ...extra, ...ids.map(shq)].join(' ');
}
