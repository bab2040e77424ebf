// Adds up jest's JSON reports and pytest's JUnit XML into the one closing line CI reads.
const fs = require('node:fs');
const path = require('node:path');

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
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 ? 1 : 0);
