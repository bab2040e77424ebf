/**
 * `ratchet check` on each seed GPU config against a fake GPU host: an `nvidia-smi` on PATH that answers as a
 * 4x H100 80GB host does (its GPU list, its header with the CUDA version, its peer-to-peer matrix), and a fake
 * vLLM CUDA venv whose python prints versions. The expected numbers are worked out here from the configs'
 * keys and the fake's memory figures, apart from the code under test.
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runChecks } from '../../../src/check';
import { parseGpuQuery, parseP2p } from '../../../src/check/gpuHost';

const REPO = path.join(__dirname, '../../..');
const seed = (f: string) => path.join(REPO, 'configs/gpu', f);
const TOTAL = 81559; // MiB, an H100 80GB HBM3 as nvidia-smi reports it

let dir: string;
const saved = { PATH: process.env.PATH, RATCHET_HOME: process.env.RATCHET_HOME };

/** The fake nvidia-smi: free MiB per GPU and the p2p cell between GPUs 2 and 3 are set per test. */
function fakeHost(free: number[], p2p23 = 'OK', vllm = true): void {
  const bin = path.join(dir, 'bin');
  mkdirSync(bin, { recursive: true });
  const query = free.map((f, i) => `${i}, NVIDIA H100 80GB HBM3, ${TOTAL}, ${f}, 550.54.15`).join('\n');
  const n = free.length;
  const matrix = ['        ' + free.map((_, i) => `GPU${i}`).join('\t'),
    ...free.map((_, a) => `GPU${a}\t` + free.map((_, b) => (a === b ? 'X' : (a === 2 && b === 3) || (a === 3 && b === 2) ? p2p23 : 'OK')).join('\t')),
    '', 'Legend:', '  X    = Self', '  OK   = Status Ok', '  NS   = Not supported'].join('\n');
  writeFileSync(path.join(bin, 'nvidia-smi'), `#!/bin/bash
case "$*" in
  --query-gpu=*) cat <<'EOF'
${query}
EOF
  ;;
  "topo -p2p n") cat <<'EOF'
${matrix}
EOF
  ;;
  "") echo "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |"; echo "${n} GPUs" ;;
  *) echo "unexpected: $*" >&2; exit 9 ;;
esac
`);
  chmodSync(path.join(bin, 'nvidia-smi'), 0o755);
  const py = path.join(dir, 'home/venvs/vllm-cuda/bin/python');
  rmSync(path.dirname(py), { recursive: true, force: true });
  if (vllm) {
    mkdirSync(path.dirname(py), { recursive: true });
    writeFileSync(py, '#!/bin/bash\necho 0.32.0 2.13.0+cu128 12.8\n');
    chmodSync(py, 0o755);
  }
  process.env.PATH = `${bin}:${saved.PATH}`;
}

async function gpuLines(file: string): Promise<{ level: string; message: string }[]> {
  const r = await runChecks(seed(file), { stack: false, gpuHost: true, host: async () => ({ cpus: 64, memoryBytes: 512 * 2 ** 30, source: 'test' }) });
  return r.lines.filter((l) => l.section === 'gpu');
}

beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'gpu-host-'));
  process.env.RATCHET_HOME = path.join(dir, 'home');
});
afterEach(() => {
  process.env.PATH = saved.PATH;
  if (saved.RATCHET_HOME === undefined) delete process.env.RATCHET_HOME; else process.env.RATCHET_HOME = saved.RATCHET_HOME;
  rmSync(dir, { recursive: true, force: true });
});

describe('ratchet check on a GPU host (fake nvidia-smi)', () => {
  test.each([['qwen3-4b-4gpu.toml', true], ['qwen3-8b-4gpu.toml', true], ['qwen3-14b-4gpu.toml', false], ['qwen3-8b-lora-1gpu.toml', false]])(
    '%s: no seed is refused for its weight sync; a full fine-tuning one says how its weights reach vLLM (issue 41): %s', async (file, full) => {
      fakeHost([80000, 80000, 80000, 80000]);
      const r = await runChecks(seed(file), { stack: false, gpuHost: true, host: async () => ({ cpus: 64, memoryBytes: 512 * 2 ** 30, source: 'test' }) });
      const sync = r.lines.filter((l) => l.message.startsWith('trainer.mode'));
      expect(sync.map((l) => [l.section, l.level])).toEqual(full ? [['config', 'ok']] : []);
    });

  test('a trainer-only host (vLLM on other hosts): its GPU is checked for the trainer alone, with no vLLM build asked for', async () => {
    fakeHost([80000], 'OK', false);
    const cfg = path.join(dir, 'trainer-host.toml');
    writeFileSync(cfg, readFileSync(seed('qwen3-8b-lora-1gpu.toml'), 'utf8').replace('http://127.0.0.1:8000/v1', 'http://10.0.0.5:8000/v1'));
    const r = await runChecks(cfg, { stack: false, gpuHost: true, host: async () => ({ cpus: 64, memoryBytes: 512 * 2 ** 30, source: 'test' }) });
    const msg = r.lines.filter((l) => l.section === 'gpu').map((l) => `${l.level} ${l.message}`).join('\n');
    expect(msg).toMatch(/ok inference\.base_urls name other hosts: their GPUs are checked there; this host's for the trainer alone/);
    // The trainer's estimate alone (22.6 GiB, as in seed 001 below) on GPU 0: no vLLM share here.
    expect(msg).toMatch(/ok GPU 0: the trainer's estimate 22\.6 GiB = 22\.6 GiB fits its 78\.1 GiB free/);
    expect(msg).not.toMatch(/vLLM CUDA build|vllm-cuda/);
    expect(r.lines.filter((l) => l.section === 'gpu' && l.level === 'fail')).toEqual([]);
  });

  test('seed 001: vLLM 0.5 x 79.6 GiB + the trainer\'s 22.6 GiB fit GPU 0; driver, CUDA and vLLM\'s build named', async () => {
    fakeHost([80000, 80000, 80000, 80000]);
    const lines = await gpuLines('qwen3-8b-lora-1gpu.toml');
    const msg = lines.map((l) => `${l.level} ${l.message}`).join('\n');
    expect(msg).toMatch(/ok NVIDIA driver 550\.54\.15, CUDA 12\.4, 4 GPU\(s\)/);
    // 0.5 x 81559 MiB = 39.8 GiB; 39.8 + 22.6 (the estimate, test/unit/check/gpu.test.ts) = 62.4 GiB of 78.1 free
    expect(msg).toMatch(/ok GPU 0: vllm-0 39\.8 GiB .* \+ the trainer's estimate 22\.6 GiB = 62\.4 GiB fits its 78\.1 GiB free/);
    expect(msg).toMatch(/ok vLLM 0\.32\.0 \(torch 2\.13\.0\+cu128, CUDA 12\.8\)/);
    expect(msg).not.toMatch(/NCCL/); // one rank
    expect(lines.filter((l) => l.level === 'fail')).toEqual([]);
  });

  test('seed 001 on a GPU another process holds: vLLM cannot take its share, a failure naming the fix', async () => {
    fakeHost([30000]);
    const lines = await gpuLines('qwen3-8b-lora-1gpu.toml');
    const f = lines.find((l) => l.message.startsWith('GPU 0'))!;
    expect(f.level).toBe('fail');
    expect(f.message).toMatch(/= 62\.4 GiB, but only 29\.3 GiB of 79\.6 are free \(vLLM refuses to start below its share\)\. Fix:/);
  });

  test.each(['qwen3-4b-4gpu.toml', 'qwen3-8b-4gpu.toml', 'qwen3-14b-4gpu.toml'])('seed 003 (%s): four GPUs checked, NCCL peer-to-peer on every trainer pair', async (file) => {
    fakeHost([80000, 80000, 80000, 80000]);
    const lines = await gpuLines(file);
    const msg = lines.map((l) => `${l.level} ${l.message}`).join('\n');
    for (const i of [0, 1, 2, 3]) expect(msg).toMatch(new RegExp(`ok GPU ${i}: vllm-${i} 31\\.9 GiB`)); // 0.4 x 81559 MiB
    expect(msg).toMatch(/ok NCCL between the trainer's GPUs: peer-to-peer on every pair \(0-1 OK, 0-2 OK, 0-3 OK, 1-2 OK, 1-3 OK, 2-3 OK\)/);
    expect(lines.filter((l) => l.level === 'fail')).toEqual([]);
  });

  test('seed 003 without peer-to-peer between GPUs 2 and 3: a warning that NCCL goes through host memory', async () => {
    fakeHost([80000, 80000, 80000, 80000], 'NS');
    const lines = await gpuLines('qwen3-14b-4gpu.toml');
    const w = lines.find((l) => l.message.startsWith('NCCL'))!;
    expect(w.level).toBe('warn');
    expect(w.message).toMatch(/no peer-to-peer between 2-3 \(NS\)/);
  });

  test('seed 003 on a 2-GPU host: the GPUs it lacks are named', async () => {
    fakeHost([80000, 80000]);
    const lines = await gpuLines('qwen3-4b-4gpu.toml');
    expect(lines.find((l) => l.level === 'fail')!.message).toMatch(/uses GPU\(s\) 2, 3 but nvidia-smi lists 0, 1\. Fix: set trainer\.gpu\.count/);
  });

  test('no vLLM CUDA build: fails, naming the set-up that installs it', async () => {
    fakeHost([80000], 'OK', false);
    const lines = await gpuLines('qwen3-8b-lora-1gpu.toml');
    expect(lines.find((l) => /vLLM/.test(l.message) && l.level === 'fail')!.message)
      .toMatch(/no vLLM CUDA build: .*venvs\/vllm-cuda does not exist\. Fix: bash infra\/main\.sh <config>/);
  });

  test('no nvidia-smi at all: fails, saying so', async () => {
    process.env.PATH = '/usr/bin:/bin'.split(':').filter((p) => !p.includes(dir)).join(':');
    const lines = await gpuLines('qwen3-8b-lora-1gpu.toml');
    expect(lines.find((l) => l.level === 'fail')!.message).toMatch(/nvidia-smi does not answer here.*Fix: run on a host with the NVIDIA driver/);
  });

  test('parsers: nvidia-smi\'s CSV and p2p matrix', () => {
    expect(parseGpuQuery('0, NVIDIA H100, 81559, 1000, 550.1\n1, NVIDIA H100, 81559, 2000, 550.1\n')).toEqual({
      driver: '550.1', gpus: [{ index: 0, name: 'NVIDIA H100', totalMiB: 81559, freeMiB: 1000 }, { index: 1, name: 'NVIDIA H100', totalMiB: 81559, freeMiB: 2000 }],
    });
    const p = parseP2p(' \tGPU0\tGPU1\t\n GPU0\tX\tCNS\t\n GPU1\tCNS\tX\t\n\nLegend:\n');
    expect([p(0, 1), p(1, 0), p(0, 0), p(0, 2)]).toEqual(['CNS', 'CNS', 'X', undefined]);
  });
});
