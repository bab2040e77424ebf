/**
 * The deployment files a user runs (infra/cluster/README.md): the systemd units
 * (infra/systemd) pass `systemd-analyze verify` with no warning, and the Kubernetes
 * manifests (infra/k8s) validate strictly against the API schemas (PyPI
 * kubernetes-validate, offline). Both installed by infra/deploy-env.sh; skipped loudly
 * where absent, failed under RATCHET_REQUIRE_STACK=1 (CI). Plus what docs/liveness.md
 * promises of them: every long-running service restarts always, every worker has a
 * liveness check on the file it touches.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { parseRunConfig } from '../../../src/config/load';
import { layoutEnv, stackLayout } from '../../../src/layout';
import { describeWithStack, K8S_VALIDATE, REPO } from '../../helpers/stack';

const UNITS = path.join(REPO, 'infra', 'systemd');
const K8S = path.join(REPO, 'infra', 'k8s');
/** A seed config's GPU layout (src/layout), as `ratchet layout` gives it on a host with /opt/ratchet's paths. */
function stackLayoutOf(file: string, p = { root: '/opt/ratchet', home: '/opt/ratchet/.ratchet' }) {
  const l = stackLayout(parseRunConfig(readFileSync(path.join(REPO, 'configs/gpu', file), 'utf8'), file), p);
  if (l.kind !== 'gpu') throw new Error(`${file}: not a GPU layout`);
  return l;
}
const unitFiles = readdirSync(UNITS).filter((f) => /\.(service|timer)$/.test(f)).sort();
const unit = (f: string) => readFileSync(path.join(UNITS, f), 'utf8');
/** Services that run for good (not the oneshot liveness check). */
const LONG_RUNNING = unitFiles.filter((f) => f.endsWith('.service') && !f.startsWith('ratchet-liveness@'));
const WORKERS = ['trainer', 'trainer-gpu', 'worker-main', 'worker-rollout'];
const K8S_GPU = path.join(K8S, 'gpu');

describe('deployment files: what they promise', () => {
  test('the documented units are all there', () => {
    expect(unitFiles).toEqual(expect.arrayContaining([
      'ratchet-postgres.service', 'ratchet-temporal.service', 'ratchet-minio.service', 'ratchet-inference.service',
      'ratchet-worker-main.service', 'ratchet-worker-rollout.service', 'ratchet-trainer.service',
      'ratchet-liveness@.service', 'ratchet-liveness@.timer',
      'ratchet-inference-gpu@.service', 'ratchet-trainer-gpu.service',
    ]));
  });

  test('the GPU units run the layout\'s processes: a vLLM replica per instance, the trainer under torchrun; both probed', () => {
    expect(unit('ratchet-inference-gpu@.service')).toMatch(/^ExecStart=\/usr\/bin\/bash \/opt\/ratchet\/infra\/systemd\/layout-exec\.sh vllm-%i$/m);
    expect(unit('ratchet-inference-gpu@.service')).toMatch(/^Wants=.*ratchet-liveness@inference-gpu-%i\.timer/m);
    expect(unit('ratchet-trainer-gpu.service')).toMatch(/^ExecStart=\/usr\/bin\/bash \/opt\/ratchet\/infra\/systemd\/layout-exec\.sh worker-trainer$/m);
    expect(readFileSync(path.join(UNITS, 'liveness-check.sh'), 'utf8')).toMatch(/^ {2}inference-gpu-\*\)/m);
  });

  test.each(LONG_RUNNING)('%s restarts always', (f) => {
    expect(unit(f)).toMatch(/^Restart=always$/m);
  });

  test.each(WORKERS)('ratchet-%s touches a liveness file that its timer checks', (name) => {
    const text = unit(`ratchet-${name}.service`);
    expect(text).toContain(`RATCHET_LIVENESS_FILE=/run/ratchet/${name}/alive`);
    expect(text).toMatch(new RegExp(`^RuntimeDirectory=ratchet/${name}$`, 'm'));
    expect(text).toMatch(new RegExp(`^Wants=.*ratchet-liveness@${name}\\.timer`, 'm'));
    // liveness-check.sh NAME reads /run/ratchet/NAME/alive and kills ratchet-NAME.service.
    const check = readFileSync(path.join(UNITS, 'liveness-check.sh'), 'utf8');
    expect(check).toContain('file="${RATCHET_LIVENESS_DIR:-/run/ratchet}/$name/alive"');
    expect(check).toContain('unit="ratchet-$name.service"');
  });

  test.each(['inference', 'temporal'])('ratchet-%s (no liveness file of its own) is probed by its liveness timer', (name) => {
    expect(unit(`ratchet-${name}.service`)).toMatch(new RegExp(`^Wants=.*ratchet-liveness@${name}\\.timer`, 'm'));
    expect(readFileSync(path.join(UNITS, 'liveness-check.sh'), 'utf8')).toMatch(new RegExp(`^ {2}${name}\\) probe\\(\\)`, 'm'));
  });

  test('Worker Versioning is on (docs/upgrades.md); worker-main and worker-rollout of one image name one build', () => {
    expect(readFileSync(path.join(UNITS, 'ratchet.env'), 'utf8')).toMatch(/^RATCHET_WORKER_VERSIONING=on$/m);
    const workers = readFileSync(path.join(K8S, 'workers.yaml'), 'utf8');
    expect(workers).toMatch(/^ {2}RATCHET_WORKER_VERSIONING: "on"$/m);
    const builds = workers.split(/^---$/m).filter((doc) => /^ {2}name: worker-(main|rollout)$/m.test(doc))
      .map((doc) => [/^ {10}image: (\S+)$/m.exec(doc)?.[1], /- name: RATCHET_BUILD_ID\n\s+value: "([^"]+)"/.exec(doc)?.[1]]);
    expect(builds).toHaveLength(2);
    expect(builds[0]![1]).toBeDefined();
    expect(builds[1]).toEqual(builds[0]);
  });

  test('every worker container has a liveness probe on its liveness file; every other workload has a probe', () => {
    const workloads = [K8S, K8S_GPU].flatMap((d) => readdirSync(d).filter((f) => f.endsWith('.yaml')).map((f) => path.join(d, f)))
      .flatMap((f) => readFileSync(f, 'utf8').split(/^---$/m))
      .filter((doc) => /^kind: (Deployment|StatefulSet)$/m.test(doc));
    const names = workloads.map((doc) => /^ {2}name: (\S+)$/m.exec(doc)![1]);
    expect(names).toEqual(expect.arrayContaining(['postgres', 'minio', 'temporal', 'inference', 'worker-main', 'worker-rollout', 'trainer', 'vllm-gpu', 'trainer-gpu']));
    for (const doc of workloads) {
      // The pod template's containers: from `containers:` to the next key at its level or above.
      const after = doc.split(/^ {6}containers:$/m)[1]!;
      const section = after.split(/^ {0,6}\S/m)[0]!;
      const containers = section.split(/^ {8}- name: /m).slice(1);
      expect(containers.length).toBeGreaterThan(0);
      for (const c of containers) expect(c).toContain('livenessProbe:');
    }
    for (const name of WORKERS) {
      const doc = workloads.find((d) => new RegExp(`^ {2}name: ${name}$`, 'm').test(d))!;
      expect(doc).toContain('stat -c %Y /run/ratchet/alive');
    }
  });
});

describe('the GPU layout in the deployment files (seed 003, configs/gpu/qwen3-14b-4gpu.toml: LoRA, the shape a run can sync)', () => {
  const docs = () => readdirSync(K8S_GPU).filter((f) => f.endsWith('.yaml')).flatMap((f) => readFileSync(path.join(K8S_GPU, f), 'utf8').split(/^---$/m));
  const workload = (name: string) => docs().find((d) => /^kind: StatefulSet$/m.test(d) && new RegExp(`^ {2}name: ${name}$`, 'm').test(d))!;

  test('Kubernetes: one vLLM pod per GPU group with its device request and the config\'s flags; the trainer under torchrun on 4 GPUs', () => {
    const layout = stackLayoutOf('qwen3-14b-4gpu.toml');
    const vllm = workload('vllm-gpu');
    expect(vllm).toMatch(new RegExp(`^ {2}replicas: ${layout.inference.length}$`, 'm'));
    expect(vllm).toMatch(new RegExp(`nvidia\\.com/gpu: ${layout.inference[0]!.gpus.length}( +#.*)?$`, 'm'));
    // Every flag the layout gives a replica, but the host's own (model path, host, port, GPU share beside the trainer).
    const flags = layout.inference[0]!.args.slice(2).join(' ').split(/ (?=--)/)
      .filter((f) => !/^--(model|host|port|gpu-memory-utilization|enforce-eager) ?/.test(f));
    for (const f of flags) expect(vllm).toContain(`- ${f.replace(' ', '=')}`);
    const trainer = workload('trainer-gpu');
    expect(trainer).toMatch(/command: \["\/opt\/ratchet\/\.ratchet\/venvs\/trainer\/bin\/torchrun", "--standalone", "--nproc-per-node", "4", "--max-restarts", "0", "-m", "ratchet_trainer\.worker"\]/);
    expect(trainer).toMatch(/nvidia\.com\/gpu: 4$/m);
  });

  test('systemd: layout-exec.sh runs the process the layout names, with its environment; the unit\'s liveness file wins', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-layout-exec-'));
    try {
      const home = path.join(dir, 'home');
      execFileSync('mkdir', ['-p', path.join(home, 'venvs/trainer/bin'), path.join(home, 'venvs/vllm-cuda/bin')]);
      const fake = '#!/usr/bin/env bash\necho "cwd=$PWD"; env | grep -E "^(CUDA_VISIBLE_DEVICES|PYTORCH_CUDA_ALLOC_CONF|RATCHET_LIVENESS_FILE|HF_HUB_OFFLINE)=" | sort; printf "arg=%s\\n" "$@"\n';
      writeFileSync(path.join(home, 'venvs/trainer/bin/torchrun'), fake, { mode: 0o755 });
      writeFileSync(path.join(home, 'venvs/vllm-cuda/bin/python'), fake, { mode: 0o755 });
      const l = stackLayoutOf('qwen3-4b-4gpu.toml', { root: REPO, home });
      writeFileSync(path.join(dir, 'layout.env'), layoutEnv(l));
      const exec = (name: string, env: Record<string, string> = {}) => spawnSync('bash', [path.join(UNITS, 'layout-exec.sh'), name], {
        env: { PATH: process.env.PATH, RATCHET_LAYOUT_ENV: path.join(dir, 'layout.env'), ...env }, encoding: 'utf8',
      });
      const t = exec('worker-trainer', { RATCHET_LIVENESS_FILE: '/run/ratchet/trainer-gpu/alive' });
      expect(t.status).toBe(0);
      expect(t.stdout.split('\n')).toEqual([
        `cwd=${path.join(REPO, 'trainer')}`, 'CUDA_VISIBLE_DEVICES=0,1,2,3', 'HF_HUB_OFFLINE=1', 'PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True',
        'RATCHET_LIVENESS_FILE=/run/ratchet/trainer-gpu/alive',
        'arg=--standalone', 'arg=--nproc-per-node', 'arg=4', 'arg=--max-restarts', 'arg=0', 'arg=-m', 'arg=ratchet_trainer.worker', '',
      ]);
      const v = exec('vllm-2');
      expect(v.status).toBe(0);
      expect(v.stdout).toContain('CUDA_VISIBLE_DEVICES=2\n');
      expect(v.stdout).toContain('arg=--port\narg=8002\n');
      const none = exec('vllm-7');
      expect(none.status).toBe(78);
      expect(none.stderr).toMatch(/has no process vllm-7/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('infra/systemd/liveness-check.sh (with a fake systemctl)', () => {
  /**
   * Runs the check for `name` (trainer unless given) with its liveness file `ageS` old (undefined: no file),
   * the process started `startedS` ago; `healthy`: what a fake curl answers (the inference probe).
   */
  let lastCurl = '';
  function check(opts: { ageS?: number; startedS: number; active?: boolean; name?: string; healthy?: boolean }): string[] {
    const name = opts.name ?? 'trainer';
    const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-liveness-'));
    try {
      const now = Math.floor(Date.now() / 1000);
      const started = new Date((now - opts.startedS) * 1000).toISOString();
      const calls = path.join(dir, 'calls');
      writeFileSync(path.join(dir, 'systemctl'), [
        '#!/usr/bin/env bash',
        `echo "$*" >> '${calls}'`,
        'case "$*" in',
        `  *ActiveState*) echo ${opts.active === false ? 'inactive' : 'active'} ;;`,
        '  *MainPID*) echo 4242 ;;',
        `  *ExecMainStartTimestamp*) echo '${started}' ;;`,
        'esac',
      ].join('\n'), { mode: 0o755 });
      writeFileSync(path.join(dir, 'curl'), `#!/usr/bin/env bash\necho "$*" >> '${calls}'\nexit ${opts.healthy ? 0 : 7}\n`, { mode: 0o755 });
      const run = path.join(dir, 'run');
      execFileSync('mkdir', ['-p', path.join(run, name)]);
      if (opts.ageS !== undefined) {
        const file = path.join(run, name, 'alive');
        writeFileSync(file, '');
        execFileSync('touch', ['-d', `@${now - opts.ageS}`, file]);
      }
      spawnSync('bash', [path.join(UNITS, 'liveness-check.sh'), name], {
        env: { ...process.env, PATH: `${dir}:${process.env.PATH}`, RATCHET_LIVENESS_DIR: run }, encoding: 'utf8',
      });
      const lines = readFileSync(calls, 'utf8').split('\n');
      lastCurl = lines.filter((l) => l.includes('/health')).join('\n');
      return lines.filter((l) => l.startsWith('kill'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  test('kills a unit whose liveness file is stale, and only then', () => {
    expect(check({ ageS: 90, startedS: 600 })).toEqual(['kill -s KILL ratchet-trainer.service']);
    expect(check({ ageS: 5, startedS: 600 })).toEqual([]);
    expect(check({ ageS: 90, startedS: 600, active: false })).toEqual([]);
  });

  test('a file older than the process is its predecessor\'s: the new process has its start grace', () => {
    expect(check({ ageS: 900, startedS: 30 })).toEqual([]);
    expect(check({ startedS: 100 })).toEqual([]);
    expect(check({ startedS: 400 })).toEqual(['kill -s KILL ratchet-trainer.service']);
  });

  test('a GPU layout\'s replica N is probed at the URL its layout gives it, and its instance unit is the one killed', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-liveness-layout-'));
    const saved = process.env.RATCHET_LAYOUT_ENV;
    try {
      writeFileSync(path.join(dir, 'layout.env'), layoutEnv(stackLayoutOf('qwen3-4b-4gpu.toml')));
      process.env.RATCHET_LAYOUT_ENV = path.join(dir, 'layout.env');
      expect(check({ name: 'inference-gpu-2', ageS: 90, startedS: 600, healthy: false })).toEqual(['kill -s KILL ratchet-inference-gpu@2.service']);
      expect(check({ name: 'inference-gpu-2', ageS: 90, startedS: 600, healthy: true })).toEqual([]);
      expect(lastCurl).toContain('http://127.0.0.1:8002/health');
    } finally {
      if (saved === undefined) delete process.env.RATCHET_LAYOUT_ENV; else process.env.RATCHET_LAYOUT_ENV = saved;
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('vLLM touches no file: its /health answer touches it for it; a hung one (no answer for the limit) is killed', () => {
    expect(check({ name: 'inference', ageS: 90, startedS: 600, healthy: true })).toEqual([]);
    expect(check({ name: 'inference', ageS: 90, startedS: 600, healthy: false })).toEqual(['kill -s KILL ratchet-inference.service']);
    expect(check({ name: 'inference', ageS: 30, startedS: 600, healthy: false })).toEqual([]); // not yet
    expect(check({ name: 'inference', startedS: 100, healthy: false })).toEqual([]); // start grace
  });
});

describeWithStack('systemd units: systemd-analyze verify', ['systemdAnalyze'], () => {
  test('every unit verifies with no warning', () => {
    // The units name /opt/ratchet and /etc/ratchet (README); verify checks that each command
    // exists, so check a copy that points at this clone.
    const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-units-'));
    try {
      for (const f of unitFiles) {
        writeFileSync(path.join(dir, f), unit(f)
          .replaceAll('/etc/ratchet/ratchet.env', path.join(UNITS, 'ratchet.env'))
          .replaceAll('/opt/ratchet', REPO));
      }
      // A template is verified through an instance of it.
      const targets = unitFiles.map((f) => path.join(dir, f.replace('@.', '@trainer.')));
      for (const f of unitFiles.filter((x) => x.includes('@.'))) {
        writeFileSync(path.join(dir, f.replace('@.', '@trainer.')), readFileSync(path.join(dir, f)));
      }
      const r = spawnSync('systemd-analyze', ['verify', '--man=no', ...targets], { encoding: 'utf8', cwd: dir });
      // Unknown keys and bad values are only warnings to systemd (exit 0): any output is a failure here.
      const complaints = `${r.stdout}${r.stderr}`.split('\n').filter((l) => l.includes(dir) || /ratchet-/.test(l));
      expect(complaints).toEqual([]);
      expect(r.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describeWithStack('Kubernetes manifests: kubernetes-validate --strict', ['k8sValidate'], () => {
  test('every resource validates against the API schemas', () => {
    const files = [K8S, K8S_GPU].flatMap((d) => readdirSync(d).filter((f) => f.endsWith('.yaml')).map((f) => path.join(d, f)));
    let out: string;
    try {
      out = execFileSync(K8S_VALIDATE, ['--strict', ...files], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (err) {
      throw new Error(`kubernetes-validate failed:\n${(err as { stdout?: string }).stdout ?? ''}${(err as { stderr?: string }).stderr ?? ''}`);
    }
    const passed = out.split('\n').filter((l) => l.startsWith('INFO') && l.includes('passed'));
    expect(passed.length).toBeGreaterThanOrEqual(19);
    expect(out).not.toMatch(/^(ERROR|WARN)/m);
  });
});
