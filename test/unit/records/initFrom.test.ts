/**
 * [model] init_from on a real local store: "<run>" resolves to the origin's last checkpoint,
 * "<run>@<step>" to that step's; both verified (manifest sha256) and checked against the base model
 * and LoRA shape the checkpoint's trainer_state.json records. Each problem is refused before anything
 * starts, naming the key; openRun stores the resolution with the config.
 */
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { ApplicationFailure } from '@temporalio/common';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { runKeys } from '../../../src/artifacts/keys';
import { createMetricsActivities } from '../../../src/activities/metrics';
import { createConfigActivities } from '../../../src/activities/config';
import { parseRunConfig } from '../../../src/config/load';
import { RunConfig } from '../../../src/config/schema';
import type { ArtifactRef } from '../../../src/artifacts/ref';
import type { RunStateFile, StepRecord } from '../../../src/contracts';
import { InitFromError, parseInitFrom, resolveInitFrom } from '../../../src/records/initFrom';
import { ref } from '../../helpers/workflowFakes';

const logger = pino({ level: 'silent' });
const MODEL = '/models/SmolLM2-135M-Instruct';
const LORA = { rank: 8, alpha: 16, dropout: 0, target_modules: ['q_proj', 'v_proj'] };

interface OriginOpts {
  steps?: number;
  /** Steps recorded with a step fault (no checkpoint of their own). */
  faults?: number[];
  lora?: Record<string, unknown>;
  modelPath?: string;
}

/** An origin run "sft-1" in `store`: config.json, steps 0..n-1 with real checkpoint directories and their records. */
async function origin(store: LocalArtifactStore, o: OriginOpts = {}) {
  const { recordStep } = createMetricsActivities({ store, logger });
  const configRef = await store.putJson(runKeys.config('sft-1'), { origin: true });
  const ckpts: { checkpoint: ArtifactRef; adapter: ArtifactRef }[] = [];
  let last: { checkpoint: ArtifactRef; adapter: ArtifactRef } | undefined;
  for (let s = 0; s < (o.steps ?? 2); s++) {
    const fault = o.faults?.includes(s);
    if (!fault) {
      const src = mkdtempSync(path.join(tmpdir(), 'ratchet-init-src-'));
      mkdirSync(path.join(src, 'adapter'));
      writeFileSync(path.join(src, 'adapter', 'adapter_model.safetensors'), Buffer.alloc(64, s + 1));
      writeFileSync(path.join(src, 'trainer_state.json'), JSON.stringify({
        format: 'ratchet.trainer_state/v1', run_id: 'sft-1', step: s, policy_version: s + 1,
        trainer_config: { mode: 'lora', lora: { ...LORA, dropout: 0.05, ...o.lora }, model: { path: o.modelPath ?? MODEL } },
      }));
      const key = runKeys.checkpoint('sft-1', s, String(s).repeat(64));
      const checkpoint = await store.putDir(key, src);
      const adapter = await store.putDir(`${key}/adapter`, store.localPath(`${key}/adapter`));
      last = { checkpoint, adapter };
    }
    ckpts.push(last!);
    const pv = ckpts.filter((_, i) => !o.faults?.includes(i)).length;
    const record: StepRecord = {
      format: 'ratchet.step/v1', run_id: 'sft-1', step: s, time: `2026-01-01T00:0${s}:00Z`, policy_version: pv,
      mean_reward: 0, reward_std: 0, reward_components: {}, rollouts: 0, samples: 2, dropped: {}, stop_reasons: {},
      mean_staleness: 0, completion_tokens: 0, tool_calls: 0, trainer: {}, timing_ms: {},
      ...(last ? { checkpoint: last.checkpoint, adapter: last.adapter } : {}),
      ...(fault ? { error: { type: 'NonFiniteGradient', message: 'gradient norm is nan' } } : {}),
    };
    const state: RunStateFile = {
      format: 'ratchet.run-state/v1', runId: 'sft-1', configSha256: configRef.sha256, completedStep: s, nextStep: s + 1,
      policyVersion: pv, configRef: ref('config'), seed: 0, ...(last ? { checkpoint: last.checkpoint, adapter: last.adapter } : {}),
    };
    await recordStep({ record, state });
  }
  return ckpts;
}

const newConfig = (over: { init_from?: string; lora?: Record<string, unknown>; path?: string } = {}) => RunConfig.parse({
  model: { path: over.path ?? MODEL, init_from: over.init_from ?? 'sft-1' },
  trainer: { lora: { ...LORA, ...over.lora } },
  env: [{ id: 'swe-grep' }],
});

const storeIn = () => new LocalArtifactStore(mkdtempSync(path.join(tmpdir(), 'ratchet-init-')));

describe('model.init_from', () => {
  it('parses "<run>" and "<run>@<step>", and refuses anything else naming the key', () => {
    expect(parseInitFrom('sft-1')).toEqual({ runId: 'sft-1' });
    expect(parseInitFrom('sft-1@3')).toEqual({ runId: 'sft-1', step: 3 });
    expect(() => parseInitFrom('sft-1@x')).toThrow(/^model.init_from: "sft-1@x" is not "<run id>" or "<run id>@<step>"/);
    expect(() => parseRunConfig('[model]\ninit_from = "a/b"\n[[env]]\nid = "swe-grep"\n', 'c.toml')).toThrow(/c.toml: model.init_from: use "<run id>"/);
    expect(() => parseRunConfig('[model]\ninit = { from = "x" }\n[[env]]\nid = "swe-grep"\n', 'c.toml')).toThrow(/model.init: is written by the run itself/);
    expect(() => parseRunConfig('[model]\ninit_from = "x"\n[trainer]\nmode = "full"\n[[env]]\nid = "swe-grep"\n', 'c.toml')).toThrow(/model.init_from: .*trainer.mode is "full"/);
  });

  it('"<run>" is its last checkpoint, "<run>@<step>" that step\'s; a changed dropout is fine (not in the weights)', async () => {
    const store = storeIn();
    const ckpts = await origin(store, { steps: 3 });
    const last = await resolveInitFrom(store, newConfig(), 'rl-1');
    expect(last).toEqual({ from: 'sft-1', run_id: 'sft-1', step: 2, policy_version: 3, ...ckpts[2] });
    const at1 = await resolveInitFrom(store, newConfig({ init_from: 'sft-1@1', lora: { dropout: 0.3 } }), 'rl-1');
    expect(at1).toEqual({ from: 'sft-1@1', run_id: 'sft-1', step: 1, policy_version: 2, ...ckpts[1] });
    // Independent of the resolver: the refs name the directories the checkpoint keys say.
    expect(at1.checkpoint.uri).toMatch(/\/runs\/sft-1\/checkpoints\/step-1-1{16}$/);
    expect(at1.adapter.uri).toBe(`${at1.checkpoint.uri}/adapter`);
  });

  it.each([
    ['a run that is not in the store', { init_from: 'nope' }, {}, /run "nope" is not in this run's artifact store .*Fix: check the run id/],
    ['a step it does not have', { init_from: 'sft-1@7' }, {}, /run "sft-1" has no step 7 \(steps with a checkpoint: 0, 1\)/],
    ['a step that trained nothing', { init_from: 'sft-1@1' }, { faults: [1] }, /step 1 of run "sft-1" saved no checkpoint of its own \(NonFiniteGradient/],
    ['another base model', {}, { modelPath: '/models/Qwen3-0.6B' }, /trained for another model or LoRA shape: base model \(model.path\) "\/models\/Qwen3-0.6B" vs this run's "\/models\/SmolLM2-135M-Instruct"/],
    ['another LoRA rank', {}, { lora: { rank: 16 } }, /another model or LoRA shape: trainer.lora.rank 16 vs 8/],
    ['other target modules', {}, { lora: { target_modules: ['q_proj'] } }, /trainer.lora.target_modules \["q_proj"\] vs \["q_proj","v_proj"\]/],
  ])('refuses %s, naming the key and the fix', async (_what, cfg, o, message) => {
    const store = storeIn();
    await origin(store, o);
    const err = await resolveInitFrom(store, newConfig(cfg), 'rl-1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InitFromError);
    expect((err as Error).message).toMatch(/^model.init_from: /);
    expect((err as Error).message).toMatch(message);
  });

  it('refuses a run that has no checkpoint yet, and this run itself', async () => {
    const store = storeIn();
    await store.putJson(runKeys.config('sft-1'), {});
    await expect(resolveInitFrom(store, newConfig(), 'rl-1')).rejects.toThrow(/run "sft-1" has no checkpoint yet \(no step completed\)/);
    await expect(resolveInitFrom(store, newConfig(), 'sft-1')).rejects.toThrow(/names this run itself/);
  });

  it('refuses a checkpoint whose adapter no longer verifies (a flipped byte), pointing at an earlier step', async () => {
    const store = storeIn();
    const ckpts = await origin(store);
    const file = path.join(store.localPath(runKeys.checkpoint('sft-1', 1, '1'.repeat(64))), 'adapter', 'adapter_model.safetensors');
    const buf = readFileSync(file);
    buf[3] = buf[3]! ^ 0xff;
    writeFileSync(file, buf);
    await expect(resolveInitFrom(store, newConfig(), 'rl-1')).rejects.toThrow(/the checkpoint of sft-1@1 does not verify: .*Fix: name an earlier step \("sft-1@<step>"\)/);
    // The earlier step is sound and resolves.
    expect((await resolveInitFrom(store, newConfig({ init_from: 'sft-1@0' }), 'rl-1')).checkpoint).toEqual(ckpts[0]!.checkpoint);
  });

  it('openRun resolves it before anything starts and stores it with the config; a bad one fails the run as ConfigError', async () => {
    const store = storeIn();
    const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-init-cfg-'));
    const toml = (from: string) => `[model]\npath = "${MODEL}"\ninit_from = "${from}"\n[trainer.lora]\nrank = 8\nalpha = 16\ntarget_modules = ["q_proj", "v_proj"]\n` +
      `[artifacts]\nroot = "${store.root}"\n[[env]]\nid = "swe-grep"\n`;
    const ckpts = await origin(store);
    writeFileSync(path.join(dir, 'good.toml'), toml('sft-1@0'));
    writeFileSync(path.join(dir, 'bad.toml'), toml('sft-1@5'));
    const { openRun } = createConfigActivities({ store, logger });
    const opened = await openRun({ configPath: path.join(dir, 'good.toml'), runId: 'rl-1' });
    expect(opened.loaded.config.model.init).toEqual({ from: 'sft-1@0', run_id: 'sft-1', step: 0, policy_version: 1, ...ckpts[0] });
    const stored = RunConfig.parse(await store.getJson(opened.loaded.configRef));
    expect(stored.model.init).toEqual(opened.loaded.config.model.init);
    const err = await openRun({ configPath: path.join(dir, 'bad.toml'), runId: 'rl-2' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect((err as ApplicationFailure).type).toBe('ConfigError');
    expect((err as ApplicationFailure).nonRetryable).toBe(true);
    expect((err as Error).message).toMatch(/bad.toml: model.init_from: run "sft-1" has no step 5/);
    expect(await store.exists(runKeys.config('rl-2'))).toBeUndefined();
  });
});
