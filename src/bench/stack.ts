/**
 * bench:stack — set-up time per component, cold against warm.
 *
 * Cold: the first time each step of infra/setup.sh ran in this state dir (on a
 * fresh machine, that is the whole install: apt, pip, npm, the sandbox image,
 * the model). infra/lib.sh's `timed` appends every run to
 * $RATCHET_HOME/setup-times.tsv. Warm: this bench runs infra/setup.sh again now,
 * where every step should find its stamp and skip; the ratio warm/cold shows
 * the idempotent rerun costs next to nothing.
 *
 * Writes its table, the machine and the command into BENCHMARKS.md (between
 * the bench:stack markers) and prints it.
 *   npm run bench:stack            (as root, after one `bash infra/setup.sh`)
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { paths, REPO_ROOT } from '../shared/paths';
import { writeBenchSection } from './benchmarksFile';

interface Entry { at: string; step: string; seconds: number }

const TIMES = path.join(paths.home(), 'setup-times.tsv');

function readTimes(): Entry[] {
  if (!existsSync(TIMES)) {
    throw new Error(`${TIMES} does not exist: no set-up has run in this state dir. Fix: bash infra/setup.sh, then npm run bench:stack`);
  }
  return readFileSync(TIMES, 'utf8').split('\n').filter(Boolean).map((line, i) => {
    const [at, step, seconds] = line.split('\t');
    if (!at || !step || seconds === undefined || Number.isNaN(Number(seconds))) {
      throw new Error(`${TIMES}, line ${i + 1}: expected "<time>\\t<step>\\t<seconds>", got ${JSON.stringify(line)}`);
    }
    return { at, step, seconds: Number(seconds) };
  });
}

/** The first entry of each step, in set-up order: the cold install. */
function firstPerStep(entries: Entry[]): Map<string, Entry> {
  const out = new Map<string, Entry>();
  for (const e of entries) if (!out.has(e.step)) out.set(e.step, e);
  return out;
}

function machine(): string {
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  let distro = 'unknown OS';
  try {
    distro = /PRETTY_NAME="([^"]+)"/.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? distro;
  } catch { /* not Linux */ }
  return `${cpu}, ${os.cpus().length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, ${distro}`;
}

function main(): void {
  const cold = firstPerStep(readTimes());
  const before = readTimes().length;
  const t0 = performance.now();
  execFileSync('bash', [path.join(REPO_ROOT, 'infra', 'setup.sh')], { stdio: ['ignore', 'ignore', 'inherit'] });
  const warmTotal = (performance.now() - t0) / 1000;
  const warm = firstPerStep(readTimes().slice(before));

  const rows = [...cold.values()].map((c) => {
    const w = warm.get(c.step);
    const ratio = w && c.seconds > 0 ? (w.seconds / c.seconds).toFixed(3) : '—';
    return `| ${c.step} | ${c.seconds.toFixed(1)} | ${c.at.slice(0, 16).replace('T', ' ')} | ${w ? w.seconds.toFixed(1) : '—'} | ${ratio} |`;
  });
  const coldTotal = [...cold.values()].reduce((a, c) => a + c.seconds, 0);
  const section = writeBenchSection('stack', [
    '## Set-up',
    '',
    'Time per component of `bash infra/setup.sh`. Cold: the first run in a fresh state',
    'dir on a fresh machine (apt, pip and npm downloads, the debootstrap sandbox image, the',
    'GGUF conversion, the generated task set), as recorded by `infra/lib.sh` in',
    '`.ratchet/setup-times.tsv`. Warm: the same script rerun in the same run of this bench,',
    'every step skipping on its stamp (the baseline the idempotency promise is measured by).',
    '',
    `Command: \`npm run bench:stack\` (source \`src/bench/stack.ts\`). Machine: ${machine()}; ${new Date().toISOString().slice(0, 10)}.`,
    '',
    '| component | cold s | cold run at (UTC) | warm s | warm / cold |',
    '| --- | ---: | --- | ---: | ---: |',
    ...rows,
    `| **all of infra/setup.sh** | **${coldTotal.toFixed(1)}** (sum of steps) | | **${warmTotal.toFixed(1)}** (whole script) | ${(warmTotal / coldTotal).toFixed(3)} |`,
    '',
    'The cold figures include the downloads, so they move with the mirror\'s speed; the npm',
    'step is the lockfile install only, TypeScript compilation is outside the table.',
  ]);

  process.stdout.write(`${section}\n`);
}

main();
