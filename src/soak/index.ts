/**
 * npm run soak — a long run on the real local stack with a seeded schedule of
 * faults in every phase of a step (kill -9 of each worker, SIGSTOP hangs of vLLM
 * and the trainer, Temporal and dockerd restarts), then every run invariant.
 * Prints faults injected and survived, time to recover (p50, p95) and the wall
 * time against a fault-free run of the same config in the same soak, and writes
 * them into BENCHMARKS.md. Exits 1 on any violation.
 *
 *   npm run soak [-- --steps 20 --faults 20 --seed 1 --hang-s 60 --no-baseline]
 *   npm run soak -- --partitions [--partition-s 60] [--replica-loss] [--kinds a,b,..]
 *   npm run soak -- --incidents [--incident-s 60]
 *
 * --partitions adds network partitions to the schedule (iptables DROP of vLLM's or the
 * Temporal server's port on the loopback, healed after --partition-s; needs root);
 * --replica-loss starts a second vLLM replica (port 8001) and kills it for good a third
 * of the way in. Their figures go to their own BENCHMARKS.md section (soak-partitions),
 * beside the crash-only soak's. --incidents adds the incidents an operator fixes (issue 39: a sick
 * rollout host, a trainer raising an untyped error, a slow save, the store's credentials refused;
 * INCIDENT_KINDS), each repaired after --incident-s; their figures go to the soak-incidents section. A
 * soak that plans store-credentials runs on MinIO (infra/minio.sh, started if it is not running) with
 * the stack's workers restarted on a MinIO user of its own, which the incident disables and enables.
 *
 * Needs `ratchet up` (the soak kills and restarts the stack's own processes).
 */
import { componentLogger } from '../shared/logger';
import { machineLine, writeBenchSection } from '../bench/benchmarksFile';
import { percentile, runSoak, SoakUsageError, type SoakReport } from './run';
import { FAULT_KINDS, INCIDENT_KINDS, PARTITION_KINDS, REPLICA_LOSS, type FaultKind } from './schedule';

const arg = (name: string, fallback: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] ?? fallback : fallback;
};

function summary(r: SoakReport): string[] {
  const hit = r.faults.filter((f) => f.hitAt);
  const survived = hit.filter((f) => f.recoveryS !== undefined && !f.error);
  const rec = survived.map((f) => f.recoveryS!);
  const lines = [
    `Run ${r.runId}: ${r.steps} steps, seed ${r.seed}, hangs of ${r.hangS} s${r.partitionS !== undefined ? `, partitions of ${r.partitionS} s` : ''}${r.replicaLoss ? ', one inference replica of two lost for good' : ''}${r.incidentS !== undefined ? `, incidents of ${r.incidentS} s` : ''}${r.storeUrl ? `, artifacts in ${r.storeUrl} (MinIO) on the soak's own key` : ''}.`,
    '',
    '| # | fault | step | phase at injection | recovered in s | statuses shown other than running |',
    '| ---: | --- | ---: | --- | ---: | --- |',
    ...r.faults.map((f) => `| ${f.index} | ${f.kind} | ${f.step} | ${f.hitAt?.phase ?? '(not injected)'} | ${f.recoveryS?.toFixed(1) ?? (f.error ? 'no' : '-')} | ${(f.statuses ?? []).filter((s) => s !== 'running').join(', ') || '-'} |`),
    '',
    `Faults injected ${hit.length}, survived ${survived.length}. Time to recover: p50 ${percentile(rec, 50).toFixed(1)} s, p95 ${percentile(rec, 95).toFixed(1)} s.`,
    r.baselineWallS !== undefined
      ? `Wall time ${r.wallS.toFixed(0)} s with faults, ${r.baselineWallS.toFixed(0)} s without (same config, same soak): ${(r.wallS / r.baselineWallS).toFixed(2)}x.`
      : `Wall time ${r.wallS.toFixed(0)} s (no fault-free baseline in this soak).`,
    r.violations.length === 0
      ? 'Invariants: all hold (the run completed; each step recorded once with every rollout, none lost or doubled; each trained step applied once by the optimizer; sha256; served version; no checkpoint fallback; each store-credentials incident shown as waiting-for-store; no sandbox or stray worker left).'
      : `Violations:\n${r.violations.map((v) => `- ${v}`).join('\n')}`,
  ];
  return lines;
}

async function main(): Promise<void> {
  const steps = Number(arg('steps', '20'));
  const faults = Number(arg('faults', '20'));
  const seed = Number(arg('seed', '1'));
  const hangS = Number(arg('hang-s', '60'));
  const baseline = !process.argv.includes('--no-baseline');
  const partitions = process.argv.includes('--partitions');
  const replicaLoss = process.argv.includes('--replica-loss');
  const partitionS = Number(arg('partition-s', '60'));
  const incidents = process.argv.includes('--incidents');
  const incidentS = Number(arg('incident-s', '60'));
  const known: readonly string[] = [...FAULT_KINDS, ...PARTITION_KINDS, ...INCIDENT_KINDS];
  const kindsArg = arg('kinds', '');
  const kinds = kindsArg
    ? kindsArg.split(',').map((k) => {
      if (!known.includes(k)) throw new SoakUsageError(`soak: unknown fault kind "${k}" in --kinds. Fix: use some of ${known.join(', ')} (${REPLICA_LOSS} is --replica-loss)`);
      return k as FaultKind;
    })
    : partitions || incidents ? [...FAULT_KINDS, ...(partitions ? PARTITION_KINDS : []), ...(incidents ? INCIDENT_KINDS : [])] : undefined;
  const withNetwork = partitions || replicaLoss || (kinds ?? []).some((k) => (PARTITION_KINDS as readonly string[]).includes(k));
  const withIncidents = incidents || (kinds ?? []).some((k) => (INCIDENT_KINDS as readonly string[]).includes(k));
  if (faults > steps - 1) {
    // In the 22-step soak of 40 faults 16 were never injected: each fault waits for the run to get past the one before.
    componentLogger('soak').warn({ faults, steps },
      `${faults} faults over ${steps - 1} steps that take faults: a fault waits for the run to get past the one before, so about one a step lands, and faults the run outruns end as not injected (a violation). Fix: --steps ${faults + 1} or more`);
  }
  const report = await runSoak({
    steps, faults, seed, hangS, baseline, kinds, partitionS: withNetwork ? partitionS : undefined, replicaLoss, incidentS: withIncidents ? incidentS : undefined, logger: componentLogger('soak'),
  });
  const lines = summary(report);
  process.stdout.write(`${lines.join('\n')}\n`);
  // Only a soak with its fault-free baseline writes BENCHMARKS.md: a short --no-baseline soak (a check after a fix)
  // would otherwise overwrite the section of the long one (a 5-step check replaced the 20-step crash soak's).
  if (baseline) {
    const extra = `${partitions ? ` --partitions --partition-s ${partitionS}` : ''}${incidents ? ` --incidents --incident-s ${incidentS}` : ''}${kindsArg ? ` --kinds ${kindsArg}` : ''}${replicaLoss ? ' --replica-loss' : ''}`;
    writeBenchSection(withIncidents ? 'soak-incidents' : withNetwork ? 'soak-partitions' : 'soak', [
      withIncidents
        ? '### Soak with the incidents an operator fixes (issue 39; real CPU stack; beside the soaks above)'
        : withNetwork
          ? '### Soak with network partitions and replica loss (real CPU stack; beside the crash-only soak above)'
          : '### Soak: a long run under a seeded fault schedule (real CPU stack)',
      '',
      `Command: \`npm run soak -- --steps ${steps} --faults ${faults} --seed ${seed} --hang-s ${hangS}${extra}\` (source \`src/soak/\`, config \`configs/swe-grep/soak.toml\`).`,
      `Machine: ${machineLine()}.`,
      '',
      ...lines,
    ]);
  }
  if (report.violations.length > 0) process.exit(1);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof SoakUsageError ? err.message : (err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
