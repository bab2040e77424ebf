/**
 * Token in, token out on the real stack, with the main job's own config (configs/swe-grep/smoke.toml):
 * SmolLM2-135M on vLLM, swe-grep in real sandboxes. Episodes are sampled until one has several tool
 * turns (bounded); for it:
 * - the episode is one training sample: every turn's prompt extends the last prompt and the ids the
 *   policy sampled (the batch builder's own assembly finds no break);
 * - the ids are vLLM's, token for token: each turn's prompt, sent back, is the prompt vLLM reports it
 *   ran, and the sample is exactly the last prompt plus the last sampled ids;
 * - parity: the real trainer core scores the sample's tokens; over the tokens the policy chose, its
 *   logprobs and vLLM's differ by a mean under EPISODE_PARITY_MEAN nats (fp32 both sides, no
 *   adapter). Measured here (vLLM 0.32 CPU fp32 vs torch fp32, 2026-11-27): see docs/training.md.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import Docker from 'dockerode';
import pino from 'pino';
import { createRolloutActivities } from '../../src/activities/rollout';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { loadRunConfig } from '../../src/config/load';
import { Trajectory } from '../../src/contracts/trajectory';
import { assembleTrajectory, type CompleteTurn } from '../../src/samples/assemble';
import { loadModelTokenizer } from '../../src/samples/tokenizer';
import { SandboxManager } from '../../src/sandbox';
import { loadTasks } from '../../src/tasks/load';
import { describeWithStack, REPO, STATE } from '../helpers/stack';

const BASE_URL = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const MODEL_DIR = path.join(STATE, 'models', 'SmolLM2-135M-Instruct');
const PYTHON = path.join(STATE, 'venvs', 'trainer', 'bin', 'python');
const TASK_DIR = path.join(STATE, 'tasks');
/** Episodes to try for one with at least MIN_TOOL_TURNS tool turns (about half the smoke config's have several), PARALLEL at a time. */
const MAX_EPISODES = 16;
const PARALLEL = 4;
const MIN_TOOL_TURNS = 2;
/** docs/training.md ("Parity on an episode"): the bound this test holds the real path to. */
export const EPISODE_PARITY_MEAN = 0.01;

describeWithStack('token in, token out: a multi-turn episode of the main job is one sample, vLLM\'s ids, trainer parity', ['docker', 'inference', 'model', 'trainerVenv'], () => {
  const log = pino({ level: 'silent' });
  const docker = new Docker();
  const sandboxes = new SandboxManager({ docker, log });
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-token-episode-'));
  const store = new LocalArtifactStore(path.join(dir, 'store'));
  afterAll(async () => {
    await sandboxes.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('an episode with several tool turns', async () => {
    const { config } = await loadRunConfig(path.join(REPO, 'configs', 'swe-grep', 'smoke.toml'));
    const env = config.env[0]!;
    const datasetPath = path.join(TASK_DIR, env.dataset!);
    const { tasks } = await loadTasks(datasetPath);
    const acts = createRolloutActivities({ store, sandboxes });
    let episode: Trajectory | undefined;
    const seen: string[] = [];
    // A few at a time, as a step runs them: vLLM batches them.
    for (let i = 0; i < MAX_EPISODES && !episode; i += PARALLEL) {
      const batch = await Promise.all([...Array(PARALLEL).keys()].map(async (j) => {
        const task = tasks[(i + j) % tasks.length]!;
        const summary = await acts.rollout({
          runId: `itest-token-episode-${process.pid}`, step: 0, groupId: `g${i + j}`, rolloutIndex: 0, envId: env.id,
          task: { datasetPath, instanceId: task.instance_id }, taskSetDir: TASK_DIR,
          policyVersion: 0, modelName: config.inference.served_model, sampling: config.sampling,
          envArgs: env.args ?? {}, rubric: {}, sandbox: { ...config.sandbox, warm_pool_size: 0 },
          inferenceBaseUrl: BASE_URL, seed: 100 + i + j,
        });
        return Trajectory.parse(await store.getJson(summary.trajectory));
      }));
      for (const t of batch) {
        const toolTurns = t.turns.filter((turn) => (t.messages[turn.prompt_message_count]?.tool_calls?.length ?? 0) > 0).length;
        seen.push(`${t.stop_reason}:${t.turns.length} turns/${toolTurns} with calls`);
        if (!episode && toolTurns >= MIN_TOOL_TURNS) episode = t;
      }
    }
    console.warn(`token-episode: episodes tried: ${seen.join(', ')}`);
    expect(episode).toBeDefined();
    const turns = episode!.turns as CompleteTurn[];

    // One sample: the batch builder's own assembly, with the model's real tokenizer.
    const tok = loadModelTokenizer(MODEL_DIR);
    const assembly = assembleTrajectory(turns, tok, 'split', 'token-episode');
    expect(assembly.breaks).toEqual([]);
    expect(assembly.segments).toHaveLength(1);
    const sample = assembly.segments[0]!;
    const last = turns[turns.length - 1]!;
    expect(sample.ids).toEqual([...last.prompt_token_ids, ...last.completion_token_ids]);

    // vLLM's ids: the prompt each turn sent is the prompt vLLM reports it ran (nothing re-rendered or re-tokenized).
    for (const t of turns) {
      const res = await fetch(`${BASE_URL}/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: config.inference.served_model, prompt: t.prompt_token_ids, max_tokens: 1, return_token_ids: true }),
      });
      const body = await res.json() as { choices: { prompt_token_ids: number[] }[] };
      expect(body.choices[0]!.prompt_token_ids).toEqual(t.prompt_token_ids);
    }

    // Parity over the tokens the policy chose.
    const args = path.join(dir, 'parity.json');
    writeFileSync(args, JSON.stringify({
      model_dir: MODEL_DIR, temperature: config.sampling.temperature, artifacts: dir,
      samples: [{ input_ids: sample.ids, loss_mask: sample.mask, inference_logprobs: sample.logprobs }],
    }));
    const out = execFileSync(PYTHON, [path.join(REPO, 'test', 'fixtures', 'parity', 'episode_parity.py'), args], {
      encoding: 'utf8', timeout: 300_000, env: { ...process.env, OMP_NUM_THREADS: '2', PYTHONPATH: path.join(REPO, 'trainer') },
    });
    const parity = JSON.parse(out.trim().split('\n').pop()!) as { delta_mean: number; delta_max: number; tokens: number };
    console.warn(`token-episode parity: ${JSON.stringify(parity)} over ${turns.length} turns, ${sample.ids.length} tokens`);
    expect(parity.tokens).toBe(sample.mask.reduce((a, b) => a + b, 0));
    expect(parity.delta_mean).toBeLessThan(EPISODE_PARITY_MEAN);
  }, 900_000);
});
