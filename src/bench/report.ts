/**
 * Report generation time for a run of N synthetic steps (default 100):
 *   npm run build && npm run bench:report [-- --steps 100 --repeat 5]
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import * as path from 'node:path';
import { runKeys } from '../artifacts/keys';
import { generateReport } from '../report';
import { syntheticEvalResults, syntheticStepRecords } from '../report/synthetic';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}

async function main(): Promise<void> {
  const steps = arg('steps', 100);
  const repeat = arg('repeat', 5);
  const root = mkdtempSync(path.join(tmpdir(), 'ratchet-bench-report-'));
  mkdirSync(path.join(root, runKeys.run('bench')), { recursive: true });
  writeFileSync(path.join(root, runKeys.metrics('bench')), syntheticStepRecords(steps).map((r) => JSON.stringify(r)).join('\n') + '\n');
  for (const e of syntheticEvalResults('bench', [0, Math.floor(steps / 2), steps])) {
    const file = path.join(root, runKeys.evalResult('bench', e.policy_version, e.taskset.hash));
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, JSON.stringify(e));
  }
  const times: number[] = [];
  let bytes = 0;
  for (let i = 0; i < repeat; i++) {
    const r = await generateReport('bench', { artifactsRoot: root });
    times.push(r.ms);
    bytes = r.bytes;
  }
  const sorted = [...times].sort((a, b) => a - b);
  console.log(JSON.stringify({
    bench: 'report', steps, repeat, first_ms: +times[0]!.toFixed(1), median_ms: +sorted[Math.floor(sorted.length / 2)]!.toFixed(1),
    bytes, cpu: cpus()[0]?.model, cores: cpus().length, node: process.version,
  }));
}

main().catch((err) => { console.error(err); process.exit(1); });
