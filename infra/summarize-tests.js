// Adds up jest's JSON reports and pytest's JUnit XML into the one closing line CI reads.
const fs = require('node:fs');
const path = require('node:path');

const dir = process.argv[2];
let passed = 0, failed = 0, skipped = 0;
// Only the reports themselves: the folder also holds artifacts such as the soak's saved histories.
for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
  if (!entry.isFile()) continue;
  const file = entry.name;
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
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 ? 1 : 0);
