/**
 * The layout each seed config produces (src/layout): which processes `ratchet up --config` starts, on which
 * GPUs, with which flags and environment. The expectations are written out from the configs' own keys
 * (configs/gpu/*.toml) and vLLM's and torchrun's flags, not computed by the layout's helpers.
 *
 * The "vLLM flags for full-weight sync" block:
 * What `ratchet up --config` gives vLLM for full fine-tuning (issue 41): the ratchet_weights hooks by name,
 * with infra/vllm on PYTHONPATH, and no runtime LoRA loading; a LoRA config gets none of that. The names
 * are checked against the module vLLM imports them from.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseRunConfig } from '../../../src/config/load';
import { layoutEnv, LayoutError, stackLayout, type StackLayout } from '../../../src/layout';
import { inferenceSpecs, stackUp, workerSpecs } from '../../../src/stack';
import { startService, stopService } from '../../../src/stack/processes';
import { saveLayout, savedLayout } from '../../../src/stack/layoutFile';

const seedDir = path.join(__dirname, '../../../configs/gpu');
const P = { root: '/repo', home: '/state' };
const seed = (file: string, edit: (t: string) => string = (t) => t) =>
  parseRunConfig(edit(readFileSync(path.join(seedDir, file), 'utf8')), file);
const gpuLayout = (l: StackLayout) => {
  if (l.kind !== 'gpu') throw new Error('expected a GPU layout');
  return l;
};
/** The value after a flag; undefined when the flag is absent. */
const flag = (args: string[], name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);

describe('layout of the seed configs', () => {
  test('seed 001 (qwen3-8b-lora-1gpu): one vLLM and the trainer on GPU 0, vLLM at 0.5', () => {
    const l = gpuLayout(stackLayout(seed('qwen3-8b-lora-1gpu.toml'), P));
    expect(l.model).toEqual({ path: '/state/models/Qwen3-8B', hub: 'Qwen/Qwen3-8B', servedName: 'qwen3-8b' });
    expect(l.inference).toHaveLength(1);
    const v = l.inference[0]!;
    expect(v.name).toBe('vllm-0');
    expect(v.command).toBe('/state/venvs/vllm-cuda/bin/python');
    expect(v.args.slice(0, 2)).toEqual(['-m', 'vllm.entrypoints.openai.api_server']);
    expect(flag(v.args, '--model')).toBe('/state/models/Qwen3-8B');
    expect(flag(v.args, '--served-model-name')).toBe('qwen3-8b');
    expect(flag(v.args, '--port')).toBe('8000');
    expect(flag(v.args, '--host')).toBe('127.0.0.1');
    expect(flag(v.args, '--gpu-memory-utilization')).toBe('0.5');
    expect(flag(v.args, '--max-model-len')).toBe('1024'); // orchestrator.seq_len
    expect(flag(v.args, '--logprobs-mode')).toBe('processed_logprobs');
    expect(flag(v.args, '--generation-config')).toBe('vllm');
    expect(flag(v.args, '--tool-call-parser')).toBe('hermes');
    expect(v.args).toContain('--enable-auto-tool-choice');
    expect(v.args).toContain('--enable-lora');
    // trainer.lora.rank = 4; vLLM accepts 1, 8, 16, ...: the smallest that holds rank 4 is 8
    expect(flag(v.args, '--max-lora-rank')).toBe('8');
    expect(v.args).toContain('--enforce-eager'); // beside the trainer
    expect(v.args).not.toContain('--tensor-parallel-size');
    expect(v.env).toEqual({ CUDA_VISIBLE_DEVICES: '0', VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True', HF_HUB_OFFLINE: '1' });

    const t = l.trainer;
    expect(t.name).toBe('worker-trainer');
    expect(t.command).toBe('/state/venvs/trainer/bin/torchrun');
    expect(t.args).toEqual(['--standalone', '--nproc-per-node', '1', '--max-restarts', '0', '-m', 'ratchet_trainer.worker']);
    expect(t.cwd).toBe('/repo/trainer');
    expect(t.env).toEqual({
      CUDA_VISIBLE_DEVICES: '0', PYTHONUNBUFFERED: '1', HF_HUB_OFFLINE: '1',
      RATCHET_LIVENESS_FILE: '/state/run/worker-trainer.alive', PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True',
    });
    expect(l.gpus).toEqual([{ index: 0, trainer: true, inference: ['vllm-0'], vllmUtilization: 0.5 }]);
  });

  test.each([
    ['qwen3-4b-4gpu.toml', 'qwen3-4b', 'Qwen3-4B', false],
    ['qwen3-8b-4gpu.toml', 'qwen3-8b', 'Qwen3-8B', false],
    ['qwen3-14b-4gpu.toml', 'qwen3-14b', 'Qwen3-14B', true],
  ])('seed 003 (%s): four vLLM replicas, one a GPU at 0.4, ports 8000-8003; the trainer on all four under torchrun', (file, served, dir, lora) => {
    const l = gpuLayout(stackLayout(seed(file), P));
    expect(l.model.hub).toBe(`Qwen/${dir}`);
    expect(l.inference.map((r) => [r.name, r.env.CUDA_VISIBLE_DEVICES, flag(r.args, '--port'), flag(r.args, '--gpu-memory-utilization')])).toEqual([
      ['vllm-0', '0', '8000', '0.4'], ['vllm-1', '1', '8001', '0.4'], ['vllm-2', '2', '8002', '0.4'], ['vllm-3', '3', '8003', '0.4'],
    ]);
    for (const r of l.inference) {
      expect(flag(r.args, '--model')).toBe(`/state/models/${dir}`);
      expect(flag(r.args, '--served-model-name')).toBe(served);
      expect(flag(r.args, '--max-model-len')).toBe('8192');
      expect(r.args).toContain('--enforce-eager');
      // full fine-tuning serves no adapter; LoRA r=16 is a rank vLLM takes as it is
      expect(r.args.includes('--enable-lora')).toBe(lora);
      expect(flag(r.args, '--max-lora-rank')).toBe(lora ? '16' : undefined);
    }
    expect(l.trainer.args).toEqual(['--standalone', '--nproc-per-node', '4', '--max-restarts', '0', '-m', 'ratchet_trainer.worker']);
    expect(l.trainer.env.CUDA_VISIBLE_DEVICES).toBe('0,1,2,3');
    expect(l.trainer.env.PYTORCH_CUDA_ALLOC_CONF).toBe('expandable_segments:True');
    expect(l.gpus.map((g) => [g.index, g.trainer, g.inference])).toEqual([[0, true, ['vllm-0']], [1, true, ['vllm-1']], [2, true, ['vllm-2']], [3, true, ['vllm-3']]]);
  });
});

describe('layouts the keys describe', () => {
  test('a CPU config gets the CPU layout (the stack ratchet up has always started)', () => {
    const c = parseRunConfig(readFileSync(path.join(__dirname, '../../../configs/swe-grep/smoke.toml'), 'utf8'), 'smoke.toml');
    expect(stackLayout(c, P)).toEqual({ kind: 'cpu' });
    expect(layoutEnv(stackLayout(c, P))).toBe('RATCHET_LAYOUT_KIND=cpu');
  });

  test('vLLM on GPUs of its own: no --enforce-eager, 0.9, and no expandable_segments for the trainer', () => {
    const c = seed('qwen3-8b-lora-1gpu.toml', (t) => t.replace('gpu_memory_utilization = 0.5', ''));
    const l = gpuLayout(stackLayout(c, P));
    expect(l.inference[0]!.env.CUDA_VISIBLE_DEVICES).toBe('1'); // the GPU after the trainer's
    expect(flag(l.inference[0]!.args, '--gpu-memory-utilization')).toBe('0.9');
    expect(l.inference[0]!.args).not.toContain('--enforce-eager');
    expect(l.trainer.env.PYTORCH_CUDA_ALLOC_CONF).toBeUndefined();
    expect(l.trainer.sharesGpu).toBe(false);
    expect(l.gpus.map((g) => [g.index, g.trainer, g.inference])).toEqual([[0, true, []], [1, false, ['vllm-0']]]);
  });

  test('inference.gpus and trainer.gpu.devices: a tensor-parallel replica on two GPUs, the trainer on two others', () => {
    const c = seed('qwen3-14b-4gpu.toml', (t) => t
      .replace('count = 4', 'count = 2\ndevices = [2, 3]')
      .replace(/base_urls = \[.*\]/, 'base_urls = ["http://localhost:9000/v1"]\ngpus = [[0, 1]]')
      .replace('gpu_memory_utilization = 0.4\n', ''));
    const l = gpuLayout(stackLayout(c, P));
    expect(l.inference).toHaveLength(1);
    expect(l.inference[0]!.env.CUDA_VISIBLE_DEVICES).toBe('0,1');
    expect(flag(l.inference[0]!.args, '--tensor-parallel-size')).toBe('2');
    expect(flag(l.inference[0]!.args, '--port')).toBe('9000');
    expect(l.trainer.env.CUDA_VISIBLE_DEVICES).toBe('2,3');
    expect(flag(l.trainer.args, '--nproc-per-node')).toBe('2');
  });

  test('without model.hub the layout names no hub: the files must already be at model.path', () => {
    const c = seed('qwen3-8b-lora-1gpu.toml', (t) => t.replace('hub = "Qwen/Qwen3-8B"\n', ''));
    expect(gpuLayout(stackLayout(c, P)).model).toEqual({ path: '/state/models/Qwen3-8B', servedName: 'qwen3-8b' });
    expect(layoutEnv(stackLayout(c, P))).toMatch(/^RATCHET_LAYOUT_MODEL_HUB=''$/m);
  });

  test.each([
    ['a replica on another host', (t: string) => t.replace('http://127.0.0.1:8000/v1', 'http://10.0.0.5:8000/v1'), /inference\.base_urls\[0\].*another host.*Fix:/],
    ['groups that do not match the replicas', (t: string) => t.replace('gpu_memory_utilization = 0.5', 'gpus = [[0], [1]]'), /inference\.gpus names 2 GPU group\(s\) but inference\.base_urls has 1.*Fix:/],
    ['vLLM on the trainer\'s GPU without a share', (t: string) => t.replace('gpu_memory_utilization = 0.5', 'gpus = [[0]]'), /trainer's GPU\(s\) 0 without a share.*Fix: set inference\.gpu_memory_utilization/],
    ['devices that disagree with count', (t: string) => t.replace('count = 1', 'count = 1\ndevices = [0, 1]'), /trainer\.gpu\.devices lists 2 GPU\(s\) but trainer\.gpu\.count = 1.*Fix:/],
    ['a LoRA rank vLLM cannot serve', (t: string) => t.replace('rank = 4', 'rank = 1024'), /trainer\.lora\.rank = 1024.*up to 512.*Fix:/],
  ])('refused: %s, naming the key and the fix', (_what, edit, message) => {
    const c = seed('qwen3-8b-lora-1gpu.toml', edit);
    expect(() => stackLayout(c, P)).toThrow(LayoutError);
    expect(() => stackLayout(c, P)).toThrow(message);
  });

  test('a trainer-only host (--only trainer): the torchrun job alone on its GPUs, vLLM on other hosts named in base_urls', () => {
    // Seed 003's 14B with its replicas on two other hosts, which the full layout (one host's) refuses.
    const edit = (t: string) => t.replace(/base_urls = \[.*\]/, 'base_urls = ["http://10.0.0.5:8000/v1", "http://10.0.0.6:8000/v1"]')
      .replace('gpu_memory_utilization = 0.4\n', '');
    expect(() => stackLayout(seed('qwen3-14b-4gpu.toml', edit), P)).toThrow(/inference\.base_urls\[0\].*another host/);
    const l = gpuLayout(stackLayout(seed('qwen3-14b-4gpu.toml', edit), P, { only: 'trainer' }));
    expect(l.only).toBe('trainer');
    expect(l.inference).toEqual([]);
    expect(l.trainer.args).toEqual(['--standalone', '--nproc-per-node', '4', '--max-restarts', '0', '-m', 'ratchet_trainer.worker']);
    expect(l.trainer.sharesGpu).toBe(false);
    expect(l.trainer.env).toEqual({ CUDA_VISIBLE_DEVICES: '0,1,2,3', PYTHONUNBUFFERED: '1', HF_HUB_OFFLINE: '1', RATCHET_LIVENESS_FILE: '/state/run/worker-trainer.alive' });
    expect(l.gpus).toEqual([0, 1, 2, 3].map((index) => ({ index, trainer: true, inference: [], vllmUtilization: 0 })));
    expect(layoutEnv(l)).toMatch(/^RATCHET_LAYOUT_ONLY=trainer$/m);
    expect(layoutEnv(l)).toMatch(/^RATCHET_LAYOUT_INFERENCE_COUNT=0$/m);
    // Seed 001 as it is (vLLM would share GPU 0 at 0.5): on a trainer-only host the GPU is the trainer's alone.
    const one = gpuLayout(stackLayout(seed('qwen3-8b-lora-1gpu.toml'), P, { only: 'trainer' }));
    expect([one.inference, one.trainer.env.PYTORCH_CUDA_ALLOC_CONF, one.gpus]).toEqual([[], undefined, [{ index: 0, trainer: true, inference: [], vllmUtilization: 0 }]]);
    // The CPU layout is one host's whole stack: --only is refused, naming the key and the fix.
    const cpu = parseRunConfig(readFileSync(path.join(__dirname, '../../../configs/swe-grep/smoke.toml'), 'utf8'), 'smoke.toml');
    expect(() => stackLayout(cpu, P, { only: 'trainer' })).toThrow(/--only trainer: trainer\.device = "\w+" makes the CPU layout.*Fix: set trainer\.device = "cuda"/);
  });

  test('the env format survives a shell: eval gives back each command line word for word', () => {
    const c = seed('qwen3-8b-lora-1gpu.toml', (t) => t.replace('path = ".ratchet/models/Qwen3-8B"', 'path = "/models/it\'s Qwen3 8B"'));
    const l = gpuLayout(stackLayout(c, P));
    const script = 'eval "$LAYOUT"; eval "set -- $RATCHET_LAYOUT_INFERENCE_0_COMMAND"; printf "%s\\n" "$RATCHET_LAYOUT_MODEL_PATH" "$RATCHET_LAYOUT_INFERENCE_COUNT" "$@"';
    const out = spawnSync('bash', ['-c', script], { env: { PATH: process.env.PATH, LAYOUT: layoutEnv(l) }, encoding: 'utf8' });
    expect(out.status).toBe(0);
    const words = out.stdout.trimEnd().split('\n');
    expect(words[0]).toBe("/models/it's Qwen3 8B");
    expect(words[1]).toBe('1');
    const v = l.inference[0]!;
    expect(words.slice(2)).toEqual([...Object.entries(v.env).map(([k, val]) => `${k}=${val}`), v.command, ...v.args]);
  });
});

describe('the stack takes its processes from the saved layout', () => {
  const saved = process.env.RATCHET_HOME;
  let home: string;
  beforeEach(() => { home = mkdtempSync(path.join(os.tmpdir(), 'layout-home-')); process.env.RATCHET_HOME = home; });
  afterEach(() => {
    if (saved === undefined) delete process.env.RATCHET_HOME; else process.env.RATCHET_HOME = saved;
    rmSync(home, { recursive: true, force: true });
  });

  test('a GPU layout: vLLM replicas by their ports and health, the trainer under torchrun; a CPU layout puts the CPU stack back', async () => {
    const l = stackLayout(seed('qwen3-4b-4gpu.toml'), { root: '/repo', home });
    saveLayout('configs/gpu/qwen3-4b-4gpu.toml', l);
    expect(savedLayout()?.configPath).toBe('configs/gpu/qwen3-4b-4gpu.toml');
    expect(inferenceSpecs().map((s) => [s.name, s.port, s.env?.CUDA_VISIBLE_DEVICES])).toEqual([
      ['vllm-0', 8000, '0'], ['vllm-1', 8001, '1'], ['vllm-2', 8002, '2'], ['vllm-3', 8003, '3'],
    ]);
    expect(typeof inferenceSpecs()[0]!.ready).toBe('function'); // /health, which the supervisor probes too
    const trainer = workerSpecs().find((s) => s.name === 'worker-trainer')!;
    expect(trainer.command).toBe(path.join(home, 'venvs/trainer/bin/torchrun'));
    expect(trainer.args).toContain('--nproc-per-node');
    expect(trainer.env?.CUDA_VISIBLE_DEVICES).toBe('0,1,2,3');

    saveLayout('configs/swe-grep/smoke.toml', { kind: 'cpu' });
    expect(savedLayout()).toBeUndefined();
    expect(inferenceSpecs()).toEqual([]);
    const cpuTrainer = workerSpecs().find((s) => s.name === 'worker-trainer')!;
    expect(cpuTrainer.command).toBe(path.join(home, 'venvs/trainer/bin/python'));
    expect(cpuTrainer.args).toEqual(['-m', 'ratchet_trainer.worker']);
  });

  test('a trainer-only layout: the stack is the trainer\'s torchrun job alone (no vLLM, Temporal, dockerd or TS workers); without torchrun it is refused', async () => {
    const l = stackLayout(seed('qwen3-8b-lora-1gpu.toml'), { root: path.join(__dirname, '../../..'), home }, { only: 'trainer' });
    saveLayout('configs/gpu/qwen3-8b-lora-1gpu.toml', l);
    expect(inferenceSpecs()).toEqual([]);
    expect(workerSpecs().map((s) => [s.name, s.command])).toEqual([['worker-trainer', path.join(home, 'venvs/trainer/bin/torchrun')]]);
    rmSync(path.join(home, 'run', 'layout.json'));
    // Set-up missing: torchrun and the model are named; vLLM's CUDA build is not (this host runs none).
    const err = await stackUp(() => {}, { path: 'configs/gpu/qwen3-8b-lora-1gpu.toml', layout: l }).then(() => undefined, (e: Error) => e);
    expect(err?.message).toMatch(/cannot start; missing:\n {2}torchrun in the trainer venv .*Fix: bash infra\/trainer-env\.sh\n {2}the model at /);
    expect(err?.message).not.toMatch(/vLLM/);
  });

  test('ratchet up --config on a host without vLLM\'s CUDA build or the model: refused naming both fixes, and the stack it had is kept', async () => {
    const l = stackLayout(seed('qwen3-8b-lora-1gpu.toml'), { root: path.join(__dirname, '../../..'), home });
    await expect(stackUp(() => {}, { path: 'configs/gpu/qwen3-8b-lora-1gpu.toml', layout: l }))
      .rejects.toThrow(/cannot start; missing:\n {2}vLLM's CUDA build .*Fix: bash infra\/setup\.sh configs\/gpu\/qwen3-8b-lora-1gpu\.toml[^]*the model at .*models\/Qwen3-8B/);
    expect(savedLayout()).toBeUndefined();
  });

  test('a replica starts on its GPUs with its flags, counts as started once /health answers, and stops', async () => {
    const port = 20000 + (process.pid % 20000);
    const c = seed('qwen3-8b-lora-1gpu.toml', (t) => t.replace('http://127.0.0.1:8000/v1', `http://127.0.0.1:${port}/v1`));
    const l = gpuLayout(stackLayout(c, { root: path.join(__dirname, '../../..'), home }));
    // A fake vLLM: prints what it was given, then answers /health on the port the layout gave it.
    const py = path.join(home, 'venvs/vllm-cuda/bin/python');
    mkdirSync(path.dirname(py), { recursive: true });
    writeFileSync(py, `#!/bin/bash
echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES HF_HUB_OFFLINE=$HF_HUB_OFFLINE args=$*"
port=$(printf '%s\\n' "$@" | grep -A1 -x -- --port | tail -1)
exec python3 -c "
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == '/health' else 404); self.end_headers()
http.server.HTTPServer(('127.0.0.1', $port), H).serve_forever()"
`, { mode: 0o755 });
    const spec = inferenceSpecs(l)[0]!;
    try {
      expect(await startService(spec)).toBe('started');
      const log = readFileSync(path.join(home, 'logs/vllm-0.log'), 'utf8');
      expect(log).toContain('CUDA_VISIBLE_DEVICES=0 HF_HUB_OFFLINE=1 args=-m vllm.entrypoints.openai.api_server');
      expect(log).toContain(`--port ${port} --dtype bfloat16 --gpu-memory-utilization 0.5 --max-model-len 1024`);
      expect(await spec.ready!()).toBe(true);
    } finally {
      expect(await stopService(spec.name)).toBe('stopped');
    }
    expect(await spec.ready!()).toBe(false);
  });
});

describe('vLLM flags for full-weight sync', () => {
  const REPO = path.join(__dirname, '..', '..', '..');
  const P = { root: '/repo', home: '/state' };
  const replicas = (file: string) => {
    const l = stackLayout(parseRunConfig(readFileSync(path.join(REPO, 'configs', 'gpu', file), 'utf8'), file), P);
    if (l.kind !== 'gpu') throw new Error('expected a GPU layout');
    return l.inference;
  };
  const flag = (args: string[], name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);

  test.each(['qwen3-4b-4gpu.toml', 'qwen3-8b-4gpu.toml'])('%s (full): every replica loads the hooks from infra/vllm', (file) => {
    for (const r of replicas(file)) {
      expect(flag(r.args, '--worker-extension-cls')).toBe('ratchet_weights.WeightsWorker');
      expect(flag(r.args, '--middleware')).toBe('ratchet_weights.WeightsRoute');
      expect(r.env.PYTHONPATH).toBe('/repo/infra/vllm');
      expect(r.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING).toBeUndefined();
      expect(r.args).not.toContain('--enable-lora');
    }
  });

  test.each(['qwen3-8b-lora-1gpu.toml', 'qwen3-14b-4gpu.toml'])('%s (LoRA): no hooks, runtime LoRA loading as before', (file) => {
    for (const r of replicas(file)) {
      expect([r.args.includes('--worker-extension-cls'), r.args.includes('--middleware'), r.env.PYTHONPATH]).toEqual([false, false, undefined]);
      expect(r.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING).toBe('True');
    }
  });

  test('the names are the module\'s: a class WeightsWorker and an ASGI class WeightsRoute in infra/vllm/ratchet_weights.py', () => {
    const src = readFileSync(path.join(REPO, 'infra', 'vllm', 'ratchet_weights.py'), 'utf8');
    expect(src).toMatch(/^class WeightsWorker\(/m);
    expect(src).toMatch(/^class WeightsRoute:\n[\s\S]*async def __call__\(self, scope/m);
  });
});
