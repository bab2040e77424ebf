// Adds up jest's JSON reports and pytest's JUnit XML into the one closing line CI reads.
const fs = require('node:fs');
const path = require('node:path');
const { parseCpuSamples, suiteCpu } = require('./cpu-usage');
const { jestFailures, pytestFailures, stackEvents } = require('./test-failures');

const dir = process.argv[2];
let passed = 0, failed = 0, skipped = 0;
// Only the reports themselves (infra/test.sh names them jest-*.json and pytest-*.xml): the folder
// also holds what tests leave there, such as the soak's saved histories and the multi-host timings.
for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
  if (!entry.isFile()) continue;
  const file = entry.name;
  if (!/^(jest-.*\.json|pytest-.*\.xml)$/.test(file)) continue;
  const text = fs.readFileSync(path.join(dir, file), 'utf8');
  if (file.endsWith('.json')) {
    const r = JSON.parse(text);
    passed += r.numPassedTests;
    failed += r.numFailedTests + (r.numRuntimeErrorTestSuites ?? 0);
    skipped += r.numPendingTests + r.numTodoTests;
  } else if (file.endsWith('.xml')) {
    for (const m of text.matchAll(/<testsuite\b[^>]*>/g)) {
      const attr = (n) => Number((m[0].match(new RegExp(`\\b${n}="(\\d+)"`)) ?? [0, 0])[1]);
      const total = attr('tests'), fail = attr('failures') + attr('errors'), skip = attr('skipped');
      passed += total - fail - skip; failed += fail; skipped += skip;
    }
  }
}
if (![passed, failed, skipped].every(Number.isFinite)) {
  console.log(`test summary unreadable (${passed} passed, ${failed} failed, ${skipped} skipped): a report in ${dir} is not in the expected format`);
  process.exit(1);
}
// Where the time went: each stage (infra/test.sh writes stage-times.tsv) and the ten slowest suites.
const slowest = [];
for (const file of ['jest-integration.json', 'jest-unit.json']) {
  const p = path.join(dir, file);
  if (!fs.existsSync(p)) continue;
  for (const t of JSON.parse(fs.readFileSync(p, 'utf8')).testResults ?? []) {
    slowest.push({ suite: path.basename(t.name), s: (t.endTime - t.startTime) / 1000, project: file.slice(5, -5) });
  }
}
slowest.sort((a, b) => b.s - a.s);
const top = slowest.slice(0, 10).map((r) => `${r.suite} (${r.project}) ${r.s.toFixed(0)} s`).join(', ');
const stagesFile = path.join(dir, 'stage-times.tsv');
if (fs.existsSync(stagesFile)) {
  const stages = fs.readFileSync(stagesFile, 'utf8').split('\n').filter(Boolean).map((l) => l.split('\t'));
  console.log(`stage times: ${stages.map(([n, s]) => `${n} ${Number(s).toFixed(0)} s`).join(', ')}`);
}
if (top) console.log(`slowest suites: ${top}`);
// How busy the machine was during each of the ten slowest integration suites (cpu.tsv, sampled by infra/test.sh):
// a suite at a low figure mostly waits (timeouts, heartbeats, backoff) and could share the machine with another.
const cpuFile = path.join(dir, 'cpu.tsv'), integrationFile = path.join(dir, 'jest-integration.json');
if (fs.existsSync(cpuFile) && fs.existsSync(integrationFile)) {
  const suites = (JSON.parse(fs.readFileSync(integrationFile, 'utf8')).testResults ?? [])
    .map((t) => ({ suite: path.basename(t.name), start: t.startTime, end: t.endTime }))
    .sort((a, b) => (b.end - b.start) - (a.end - a.start)).slice(0, 10);
  const rows = suiteCpu(parseCpuSamples(fs.readFileSync(cpuFile, 'utf8')), suites);
  console.log(`CPU busy (all cores) during the slowest integration suites: ${rows.map((r) =>
    `${r.suite} ${((r.end - r.start) / 1000).toFixed(0)} s ${r.busy === undefined ? 'not sampled' : `${(r.busy * 100).toFixed(0)}%`}`).join(', ')}`);
}
// CI's budget (infra/test.sh sets RATCHET_CI_START and RATCHET_CI_BUDGET_S): a run that overran it fails.
const budget = Number(process.env.RATCHET_CI_BUDGET_S ?? ''), start = Number(process.env.RATCHET_CI_START ?? '');
let overBudget = false;
if (budget > 0 && start > 0) {
  const took = Date.now() / 1000 - start;
  overBudget = took > budget;
  if (overBudget) {
    console.log(`over budget: the run took ${(took / 60).toFixed(1)} min, its budget is ${(budget / 60).toFixed(0)} min. Slowest suites: ${top}. `
      + 'Fix: make the slowest suites share runs or move their long forms to npm run test:long (README, Tests and benchmarks)');
  } else console.log(`within budget: ${(took / 60).toFixed(1)} of ${(budget / 60).toFixed(0)} min`);
}
// What failed, last: the end of CI's log is what its reader sees first.
const failures = [];
for (const file of fs.readdirSync(dir).sort()) {
  const text = () => fs.readFileSync(path.join(dir, file), 'utf8');
  if (/^jest-.*\.json$/.test(file)) failures.push(...jestFailures(JSON.parse(text()), process.cwd()));
  else if (/^pytest-.*\.xml$/.test(file)) failures.push(...pytestFailures(text()));
}
if (failures.length > 0) {
  console.log(`what failed (the whole messages are above, and the reports in ${dir}):`);
  for (const f of failures.slice(0, 10)) console.log(`  ${f.name}\n    ${f.message}`);
  if (failures.length > 10) console.log(`  and ${failures.length - 10} more`);
  // Whether the stack lost a service meanwhile (infra/test.sh's stack keeps its logs in $RATCHET_HOME/logs).
  const supervisorLog = path.join(process.env.RATCHET_HOME ?? path.join(process.cwd(), '.ratchet'), 'logs', 'supervisor.log');
  if (fs.existsSync(supervisorLog)) {
    const integration = fs.existsSync(integrationFile) ? JSON.parse(fs.readFileSync(integrationFile, 'utf8')) : undefined;
    const events = stackEvents(fs.readFileSync(supervisorLog, 'utf8'), integration, process.cwd(), start > 0 ? start * 1000 : 0);
    console.log(events.length ? `what the stack's supervisor did (${supervisorLog}):` : 'the stack\'s supervisor restarted nothing');
    for (const e of events.slice(-20)) console.log(`  ${e}`);
  }
}
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || overBudget ? 1 : 0);
