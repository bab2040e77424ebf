/**
 * npm run soak — a long run on the real local stack with a seeded schedule of
 * faults in every phase of a step (kill -9 of each worker, SIGSTOP hangs of vLLM
 * and the trainer, Temporal and dockerd restarts), then every run invariant.
 * Prints faults injected and survived, time to recover (p50, p95) and the wall
 * time against a fault-free run of the same config in the same soak, and writes
 * them into BENCHMARKS.md. Exits 1 on any violation.
 *
 *   npm run soak [-- --steps 20 --faults 20 --seed 1 --hang-s 60 --no-baseline]
 *
 * Needs `ratchet up` (the soak kills and restarts the stack's own processes).
 */
import { componentLogger } from '../shared/logger';
import { machineLine, writeBenchSection } from '../bench/benchmarksFile';
import { percentile, runSoak, type SoakReport } from './run';

const arg = (name: string, fallback: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] ?? fallback : fallback;
};

function summary(r: SoakReport): string[] {
  const hit = r.faults.filter((f) => f.hitAt);
  const survived = hit.filter((f) => f.recoveryS !== undefined && !f.error);
  const rec = survived.map((f) => f.recoveryS!);
  const lines = [
    `Run ${r.runId}: ${r.steps} steps, seed ${r.seed}, hangs of ${r.hangS} s.`,
    '',
    '| # | fault | step | phase at injection | recovered in s |',
    '| ---: | --- | ---: | --- | ---: |',
    ...r.faults.map((f) => `| ${f.index} | ${f.kind} | ${f.step} | ${f.hitAt?.phase ?? '(not injected)'} | ${f.recoveryS?.toFixed(1) ?? (f.error ? 'no' : '-')} |`),
    '',
    `Faults injected ${hit.length}, survived ${survived.length}. Time to recover: p50 ${percentile(rec, 50).toFixed(1)} s, p95 ${percentile(rec, 95).toFixed(1)} s.`,
    r.baselineWallS !== undefined
      ? `Wall time ${r.wallS.toFixed(0)} s with faults, ${r.baselineWallS.toFixed(0)} s without (same config, same soak): ${(r.wallS / r.baselineWallS).toFixed(2)}x.`
      : `Wall time ${r.wallS.toFixed(0)} s (no fault-free baseline in this soak).`,
    r.violations.length === 0 ? 'Invariants: all hold (steps once each, ledger, sha256, served version, no sandbox or stray worker left).' : `Violations:\n${r.violations.map((v) => `- ${v}`).join('\n')}`,
  ];
  return lines;
}

async function main(): Promise<void> {
  const steps = Number(arg('steps', '20'));
  const faults = Number(arg('faults', '20'));
  const seed = Number(arg('seed', '1'));
  const hangS = Number(arg('hang-s', '60'));
  const baseline = !process.argv.includes('--no-baseline');
  const report = await runSoak({ steps, faults, seed, hangS, baseline, logger: componentLogger('soak') });
  const lines = summary(report);
  process.stdout.write(`${lines.join('\n')}\n`);
  if (baseline) {
    writeBenchSection('soak', [
      '### Soak: a long run under a seeded fault schedule (real CPU stack)',
      '',
      `Command: \`npm run soak -- --steps ${steps} --faults ${faults} --seed ${seed} --hang-s ${hangS}\` (source \`src/soak/\`, config \`configs/swe-grep/soak.toml\`).`,
      `Machine: ${machineLine()}.`,
      '',
      ...lines,
    ]);
  }
  if (report.violations.length > 0) process.exit(1);
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
