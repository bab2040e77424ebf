import { firstLines, jestFailures, pytestFailures } from '../../../infra/test-failures';

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
