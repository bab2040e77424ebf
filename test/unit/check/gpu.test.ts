import { readFileSync, readdirSync } from 'node:fs';
import * as path from 'node:path';
import { parseRunConfig } from '../../../src/config/load';
import {
  CONTEXT_BYTES, GiB, KNOWN_SHAPES, checkGpuMemory, chooseParallelism, estimateTrainerMemory, layerActivationBytesPerToken, layerParams, loraParams, totalParams,
} from '../../../src/check/gpu';
import { toTrainerConfig } from '../../../src/workflows/trainerConfig';

const q8 = KNOWN_SHAPES['Qwen3-8B']!;
const seedDir = path.join(__dirname, '../../../configs/gpu');

describe('trainer GPU memory estimate', () => {
  test('Qwen3-8B parameters, by hand', () => {
    // per layer: q 4096x4096 + k,v 2 x 4096x1024 + o 4096x4096 + MLP 3 x 4096x12288 + norms 2x4096 + q/k norms 2x128
    expect(layerParams(q8)).toBe(16_777_216 + 8_388_608 + 16_777_216 + 150_994_944 + 8192 + 256);
    // untied embeddings and head 2 x 151936x4096, 36 layers, final norm: 8.19 B (the 8.19 B of BENCHMARKS.md)
    expect(totalParams(q8)).toBe(2 * 622_329_856 + 36 * 192_946_432 + 4096);
    expect(totalParams(q8)).toBe(8_190_735_360);
    // LoRA r=4 on all seven: 4 x (8192 + 2x5120 + 8192 + 2x16384 + 16384) = 303,104 a layer
    expect(loraParams(q8, 4, ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'])).toBe(303_104 * 36);
    // 2 bytes x (6x4096 + 5x4096 + 6x1024 + 4x12288)
    expect(layerActivationBytesPerToken(q8)).toBe(200_704);
  });

  test('seed 001 (Qwen3-8B, LoRA r=4, checkpointing, 4,096-token rows) against a hand computation', () => {
    const c = parseRunConfig(readFileSync(path.join(seedDir, 'qwen3-8b-lora-1gpu.toml'), 'utf8'), 'seed001.toml');
    const e = estimateTrainerMemory(c, q8);
    expect(e.tokens).toBe(4096);
    expect(e.parts.weights).toBe(2 * 8_190_735_360);
    expect(e.parts.trainable).toBe(18 * 10_911_744);
    // 36 checkpointed layer inputs (2 x 4096 bytes a token) + one layer recomputed (200,704 bytes a token)
    expect(e.parts.activations).toBe(4096 * (36 * 8192 + 200_704));
    expect(e.parts.logprobs).toBe(1024 * 151_936 * 16);
    expect(e.allocated / GiB).toBeCloseTo(19.648, 2); // measured on an H100: 19.1 GiB peak allocated
    expect(e.total).toBeCloseTo(e.allocated * 1.1 + CONTEXT_BYTES, 0);
    const lines = checkGpuMemory(c, { shape: q8, source: 'test' });
    expect(lines).toHaveLength(1);
    expect(lines[0]!.level).toBe('ok');
    expect(lines[0]!.message).toMatch(/about 22\.6 GiB of 39\.5 GiB/);
  });

  test('a trainer that cannot fit beside vLLM is refused, naming the keys and the numbers', () => {
    const text = readFileSync(path.join(seedDir, 'qwen3-8b-lora-1gpu.toml'), 'utf8')
      .replace('gpu_memory_utilization = 0.5', 'gpu_memory_utilization = 0.9');
    const c = parseRunConfig(text, 'x.toml');
    const [line] = checkGpuMemory(c, { shape: q8, source: 'test' });
    expect(line!.level).toBe('fail');
    expect(line!.message).toMatch(/needs about 22\.6 GiB per GPU but trainer\.gpu\.memory_gib = 79 x \(1 - inference\.gpu_memory_utilization = 0\.9\) = 7\.9 GiB/);
    expect(line!.message).toMatch(/trainer\.micro_batch_tokens/);
  });

  test('without checkpointing every layer keeps its activations', () => {
    const c = parseRunConfig('[[env]]\nid = "swe-grep"\n[trainer]\nmicro_batch_tokens = 4096\n[orchestrator]\nseq_len = 4096\n', 'x.toml');
    const e = estimateTrainerMemory(c, q8);
    expect(e.parts.activations).toBe(4096 * 36 * 200_704);
    // 15.26 + 27.6 + 2.32 + LoRA r=8: the issue-15 ladder measured 44.4 GiB at r=16, uncompiled
    expect(e.allocated / GiB).toBeGreaterThan(44);
    expect(e.allocated / GiB).toBeLessThan(46);
  });

  test('full fine-tuning across ranks shards weights and fp32 state', () => {
    const c = parseRunConfig(readFileSync(path.join(seedDir, 'qwen3-8b-4gpu.toml'), 'utf8'), 'x.toml');
    const e = estimateTrainerMemory(c, q8);
    expect(e.ranks).toBe(4);
    expect(e.parallelism).toBe('fsdp');
    expect(e.parts.weights).toBe((2 * 8_190_735_360) / 4);
    expect(e.parts.trainable).toBe((16 * 8_190_735_360) / 4 + 2 * 192_946_432);
  });

  test('LoRA over 4 GPUs that fits one: auto replicates the whole model on each rank; fsdp, named, shards it', () => {
    const text = readFileSync(path.join(seedDir, 'qwen3-14b-4gpu.toml'), 'utf8');
    const q14 = KNOWN_SHAPES['Qwen3-14B']!;
    const auto = estimateTrainerMemory(parseRunConfig(text, 'x.toml'), q14);
    expect(auto.parallelism).toBe('replicate');
    expect(auto.parts.weights).toBe(2 * totalParams(q14));
    // fits 79 x (1 - 0.4) = 47.4 GiB: 27.5 GiB of weights, the rest well under 20
    expect(auto.total / GiB).toBeLessThan(47.4);
    const fsdp = estimateTrainerMemory(parseRunConfig(text.replace('[trainer]\n', '[trainer]\nparallelism = "fsdp"\n'), 'x.toml'), q14);
    expect(fsdp.parallelism).toBe('fsdp');
    expect(fsdp.parts.weights).toBe((2 * totalParams(q14)) / 4);
    const [line] = checkGpuMemory(parseRunConfig(text, 'x.toml'), { shape: q14, source: 'test' });
    expect(line!.message).toMatch(/over 4 ranks \(the model replicated on each, trainer\.parallelism = "auto"\)/);
  });

  test('auto falls back to fsdp when one rank cannot hold the whole model beside vLLM', () => {
    // Full fine-tuning of 8B: 2 + 6 bytes a parameter is 61 GiB before activations, over 47.4 GiB
    const c = parseRunConfig(readFileSync(path.join(seedDir, 'qwen3-8b-4gpu.toml'), 'utf8'), 'x.toml');
    expect(estimateTrainerMemory(c, q8, 'replicate').total / GiB).toBeGreaterThan(47.4);
    expect(chooseParallelism(c, q8)).toBe('fsdp');
    const one = parseRunConfig('[[env]]\nid = "swe-grep"\n[trainer]\nparallelism = "fsdp"\n', 'x.toml');
    expect(chooseParallelism(one, q8)).toBe('single'); // one rank: nothing to replicate or shard
  });

  test('no GPU size: the estimate is printed, the fit is not checked; CPU runs are skipped', () => {
    const c = parseRunConfig('[[env]]\nid = "swe-grep"\n[model]\nname = "Qwen3-8B"\npath = "/nonexistent"\n', 'x.toml');
    expect(checkGpuMemory(c)[0]!.message).toMatch(/Set trainer\.gpu\.memory_gib/);
    const cpu = parseRunConfig('[[env]]\nid = "swe-grep"\n[trainer]\ndevice = "cpu"\n', 'x.toml');
    expect(checkGpuMemory(cpu)[0]!.level).toBe('ok');
    const unknown = parseRunConfig('[[env]]\nid = "swe-grep"\n[model]\nname = "Mystery-7B"\npath = "/nonexistent"\n', 'x.toml');
    expect(checkGpuMemory(unknown)[0]!.level).toBe('warn');
  });
});

describe('the seeds\' GPU configs', () => {
  const files = readdirSync(seedDir).filter((f) => f.endsWith('.toml'));
  test('there are the four seed shapes', () => {
    expect(files.sort()).toEqual(['qwen3-14b-4gpu.toml', 'qwen3-4b-4gpu.toml', 'qwen3-8b-4gpu.toml', 'qwen3-8b-lora-1gpu.toml']);
  });
  test.each(files)('%s parses, names a known model, fits its GPUs, and reaches the trainer with compile off', (f) => {
    const c = parseRunConfig(readFileSync(path.join(seedDir, f), 'utf8'), f);
    expect(KNOWN_SHAPES[c.model.name]).toBeDefined();
    expect(c.trainer.gpu).toBeDefined();
    const lines = checkGpuMemory(c, { shape: KNOWN_SHAPES[c.model.name], source: 'test' });
    expect(lines.map((l) => l.level)).toEqual(['ok']);
    const t = toTrainerConfig(c) as { model: { compile: unknown } };
    expect(t.model.compile).toBe(false);
  });
});
