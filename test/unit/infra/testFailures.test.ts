import { firstLines, jestFailures, pytestFailures, stackEvents } from '../../../infra/test-failures';

describe('what failed, from the test reports (infra/test-failures.js)', () => {
  test('a failed jest test is named by its suite and titles, with the first lines of its message, colours stripped', () => {
    const report = {
      testResults: [
        {
          name: '/repo/test/integration/multihost.test.ts', status: 'failed', message: 'long text', testExecError: undefined,
          assertionResults: [
            { status: 'passed', ancestorTitles: ['multi-host'], title: 'fine', failureMessages: [] },
            { status: 'failed', ancestorTitles: ['multi-host'], title: 'a run survives', failureMessages: ['\u001b[2mexpect(\u001b[22mreceived).toBe(expected)\n\nExpected: 3\nReceived: 2\n\n    at line 1\n    at line 2\n    at line 3\n    at line 4'] },
          ],
        },
        { name: '/repo/test/integration/ok.test.ts', status: 'passed', message: '', assertionResults: [{ status: 'passed', ancestorTitles: [], title: 'ok', failureMessages: [] }] },
      ],
    };
    expect(jestFailures(report, '/repo')).toEqual([{
      name: 'test/integration/multihost.test.ts › multi-host › a run survives',
      message: 'expect(received).toBe(expected)\n    Expected: 3\n    Received: 2\n        at line 1\n        at line 2\n        at line 3',
    }]);
  });

  test('a suite that failed outside its tests (an afterAll hook, an import) is named with its own message', () => {
    const report = {
      testResults: [{
        name: '/repo/test/integration/x.test.ts', status: 'failed', message: '  ● Test suite failed to run\n\n    Cannot find module',
        testExecError: { message: '', stack: 'Error: Cannot find module' },
        assertionResults: [{ status: 'passed', ancestorTitles: [], title: 'a', failureMessages: [] }],
      }],
    };
    expect(jestFailures(report, '/repo')).toEqual([{ name: 'test/integration/x.test.ts (outside its tests)', message: '● Test suite failed to run\n      Cannot find module' }]);
  });

  test('a pytest failure or error is named classname::name with its message unescaped; passes and skips are not', () => {
    const xml = `<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="4">
<testcase classname="tests.test_a" name="test_ok" time="0.1" />
<testcase classname="tests.test_a" name="test_bad" time="0.2"><failure message="assert 1 == 2&#10;  where 1 = f(&quot;x&quot;)">trace</failure></testcase>
<testcase classname="tests.test_b" name="test_skip" time="0"><skipped message="long test" /></testcase>
<testcase classname="tests.test_b" name="test_err" time="0"><error message="fixture &lt;db&gt; failed">trace</error></testcase>
</testsuite></testsuites>`;
    expect(pytestFailures(xml)).toEqual([
      { name: 'tests.test_a::test_bad', message: 'assert 1 == 2\n      where 1 = f("x")' },
      { name: 'tests.test_b::test_err', message: 'fixture <db> failed' },
    ]);
  });

  test('firstLines keeps n non-empty lines', () => {
    expect(firstLines('a\n\nb\nc', 2)).toBe('a\n    b');
    expect(firstLines(undefined)).toBe('');
  });
});

describe('what the stack\'s supervisor did, beside the suites (infra/test-failures.js stackEvents)', () => {
  const at = (hms: string) => Date.parse(`2026-12-07T${hms}Z`);
  const report = {
    testResults: [
      { name: '/repo/test/integration/supervisor.test.ts', startTime: at('14:42:50'), endTime: at('14:44:00') },
      { name: '/repo/test/integration/doctor.test.ts', startTime: at('14:44:01'), endTime: at('14:44:45') },
    ],
  };
  const line = (o: object) => JSON.stringify({ app: 'ratchet', component: 'supervisor', ...o });

  test('warnings and errors only, each with the suite that ran then; info lines, non-JSON lines and older runs\' lines left out', () => {
    const log = [
      line({ level: 50, time: '2026-12-06T10:00:00.000Z', service: 'inference', msg: 'an earlier run' }),
      line({ level: 30, time: '2026-12-07T14:40:00.000Z', msg: 'supervisor started' }),
      'not json',
      line({ level: 50, time: '2026-12-07T14:43:50.083Z', service: 'worker-rollout', msg: 'liveness went stale (frozen or wedged); kill -9 and restart' }),
      line({ level: 50, time: '2026-12-07T14:44:10.000Z', service: 'inference', msg: 'process died; restarting' }),
      line({ level: 40, time: '2026-12-07T14:50:00.000Z', service: 'worker-main', msg: 'after every suite' }),
    ].join('\n');
    expect(stackEvents(log, report, '/repo', at('14:00:00'))).toEqual([
      '14:43:50 worker-rollout: liveness went stale (frozen or wedged); kill -9 and restart (during test/integration/supervisor.test.ts)',
      '14:44:10 inference: process died; restarting (during test/integration/doctor.test.ts)',
      '14:50:00 worker-main: after every suite',
    ]);
  });

  test('no log, or a log without warnings, gives nothing', () => {
    expect(stackEvents(undefined, report)).toEqual([]);
    expect(stackEvents(line({ level: 30, time: '2026-12-07T14:40:00.000Z', msg: 'fine' }), undefined)).toEqual([]);
  });
});
