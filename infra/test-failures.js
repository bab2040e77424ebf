// What failed in a test run, each with the first lines of its message, read from the reports infra/test.sh
// writes (jest's --json, pytest's JUnit XML): summarize-tests.js prints them last, where CI's log is read
// from, since a failure's own message sits thousands of lines up among the suites' output.
// Pure functions, so test/unit/infra/testFailures.test.ts checks them on reports and logs it makes up.

const ANSI = /\x1b\[[0-9;]*m/g;

/** The first `n` non-empty lines of a message, colours stripped and common indent removed, indented under its heading. */
function firstLines(text, n = 6) {
  const lines = String(text ?? '').replace(ANSI, '').split('\n').map((l) => l.trimEnd()).filter((l) => l.trim() !== '').slice(0, n);
  const indent = Math.min(...lines.map((l) => l.length - l.trimStart().length));
  return lines.map((l) => l.slice(indent)).join('\n    ');
}

/** Failures in one jest --json report: each failed test, and each suite that failed outside its tests (a hook, an import). */
function jestFailures(report, relativeTo = '') {
  const out = [];
  for (const t of report.testResults ?? []) {
    const suite = relativeTo && t.name.startsWith(`${relativeTo}/`) ? t.name.slice(relativeTo.length + 1) : t.name;
    const failedTests = (t.assertionResults ?? []).filter((a) => a.status === 'failed');
    for (const a of failedTests) {
      out.push({ name: `${suite} › ${[...(a.ancestorTitles ?? []), a.title].join(' › ')}`, message: firstLines((a.failureMessages ?? []).join('\n')) });
    }
    // jest-circus reports an afterAll hook's error, or a suite that could not load, as the suite's message.
    if (t.status === 'failed' && (t.testExecError || failedTests.length === 0)) {
      out.push({ name: `${suite} (outside its tests)`, message: firstLines(t.message || t.testExecError?.message || t.testExecError?.stack) });
    }
  }
  return out;
}

const XML_ENTITIES = { '&lt;': '<', '&gt;': '>', '&quot;': '"', '&apos;': "'", '&#10;': '\n', '&amp;': '&' };
const unescapeXml = (s) => s.replace(/&(lt|gt|quot|apos|#10|amp);/g, (e) => XML_ENTITIES[e]);
const attr = (attrs, name) => unescapeXml((attrs.match(new RegExp(`\\b${name}="([^"]*)"`)) ?? [])[1] ?? '');

/** Failures in one pytest JUnit XML report: each test case with a <failure> or an <error>. */
function pytestFailures(xml) {
  const out = [];
  for (const m of xml.matchAll(/<testcase\b([^>]*?)(?:\/>|>([\s\S]*?)<\/testcase>)/g)) {
    const bad = /<(failure|error)\b([^>]*)>/.exec(m[2] ?? '');
    if (!bad) continue;
    out.push({ name: `${attr(m[1], 'classname')}::${attr(m[1], 'name')}`, message: firstLines(attr(bad[2], 'message')) });
  }
  return out;
}

/**
 * What the stack's supervisor did (its warnings and errors: a service it found dead or wedged and restarted),
 * each with the integration suite that ran at that moment, from its pino log (.ratchet/logs/supervisor.log) and
 * jest's report, from `sinceMs` on. A test that lost vLLM or a worker mid-run is then told apart from one that broke on its own.
 */
function stackEvents(logText, report, relativeTo = '', sinceMs = 0) {
  const suites = (report?.testResults ?? []).map((t) => ({
    suite: relativeTo && t.name.startsWith(`${relativeTo}/`) ? t.name.slice(relativeTo.length + 1) : t.name, start: t.startTime, end: t.endTime,
  }));
  const out = [];
  for (const line of String(logText ?? '').split('\n')) {
    let e;
    try { e = JSON.parse(line); } catch { continue; }
    if (!(e?.level >= 40)) continue;
    const at = typeof e.time === 'number' ? e.time : Date.parse(e.time);
    if (at < sinceMs) continue; // an earlier run's, in a log the stack appends to
    const during = suites.find((s) => s.start <= at && at <= s.end)?.suite;
    const time = Number.isFinite(at) ? new Date(at).toISOString().slice(11, 19) : '?';
    out.push(`${time} ${e.service ?? e.component ?? ''}: ${e.msg}${during ? ` (during ${during})` : ''}`);
  }
  return out;
}

module.exports = { firstLines, jestFailures, pytestFailures, stackEvents };
