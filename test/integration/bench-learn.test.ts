/**
 * bench:learn's short version (CI), the multi-turn agent case on the real stack, at the
 * smallest sizes, on the same path as the long bench (`npm run bench:learn`, out of CI): disjoint
 * task sets; path-only demonstrations by the scripted solver on real sandboxes, one of them held
 * out; an SftRun whose held-out demonstration loss vLLM scores after each step; the pre-flight on
 * the RL pool; one training seed's RL run of one step from the best SFT step (file F1, RLOO,
 * difficulty filtering with one refill round, pass-rate pools, two updates); EvalSweeps of it and of
 * the warm start, k = 2, seeded by task and sample. Whether it learns is the long bench's question;
 * this checks that the bench measures what it says, from the files on disk and the workflows'
 * histories, not from its own bookkeeping: the sets share no task, the demonstrations answer paths
 * only, the pre-flight's rate is its trajectories', the two arms' episodes of a task and sample got
 * the same seed, the RL run's adapter moved from the warm start exactly when its step trained. The
 * pre-flight's band is not applied (a two-step warm start is not the bench's): the arms always run.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { defaultPayloadConverter } from '@temporalio/common';
import { connectClient } from '../../src/cli/temporal';
import { AGENT_DEFAULTS, runAgentBench } from '../../src/bench/learnAgentBench';
import { agentSection } from '../../src/bench/learnAgentSection';
import { paths } from '../../src/shared/paths';
import { describeWithStack } from '../helpers/stack';
import { distBuilt } from '../helpers/trainrunStack';

/** The LoRA B tensors of a run's newest checkpoint, by name, as raw bytes (PEFT starts every B at zero). */
function loraB(runId: string, step?: number): Map<string, Buffer> {
  const dir = path.join(paths.artifacts(), 'runs', runId, 'checkpoints');
  const newest = readdirSync(dir).filter((d) => d.startsWith('step-') && !d.includes('.attempt-') && (step === undefined || Number(d.split('-')[1]) === step))
    .sort((a, b) => Number(a.split('-')[1]) - Number(b.split('-')[1])).pop();
  if (!newest) throw new Error(`no checkpoint in ${dir}`);
  const file = readFileSync(path.join(dir, newest, 'adapter', 'adapter_model.safetensors'));
  const headerLen = Number(file.readBigUInt64LE(0));
  const header = JSON.parse(file.subarray(8, 8 + headerLen).toString('utf8')) as Record<string, { data_offsets?: [number, number] }>;
  const data = file.subarray(8 + headerLen);
  const out = new Map<string, Buffer>();
  for (const [name, t] of Object.entries(header)) if (name.includes('lora_B') && t.data_offsets) out.set(name, data.subarray(t.data_offsets[0], t.data_offsets[1]));
  if (out.size === 0) throw new Error(`${runId}/${newest}: no lora_B tensors in the adapter`);
  return out;
}
const same = (a: Map<string, Buffer>, b: Map<string, Buffer>) => a.size === b.size && [...a].every(([k, v]) => b.get(k)?.equals(v) === true);

const ids = (file: string) => readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => (JSON.parse(l) as { instance_id: string }).instance_id);

/** Each rollout an EvalSweep scheduled, from its history: `<task>#<sample>` -> the seed it was given. */
async function sweepSeeds(workflowId: string): Promise<Map<string, number>> {
  const { client, close } = await connectClient();
  try {
    const history = await client.workflow.getHandle(workflowId).fetchHistory();
    const out = new Map<string, number>();
    for (const e of history.events ?? []) {
      const a = e.activityTaskScheduledEventAttributes;
      if (a?.activityType?.name !== 'rollout') continue;
      const input = defaultPayloadConverter.fromPayload(a.input!.payloads![0]!) as { task: { instanceId: string }; rolloutIndex: number; seed: number };
      out.set(`${input.task.instanceId}#${input.rolloutIndex}`, input.seed);
    }
    return out;
  } finally {
    await close();
  }
}

describeWithStack('bench:learn (short): SFT warm start, pre-flight, then an RL run against the warm start, multi-turn', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  test('sets -> demos -> SftRun with held-out loss -> pre-flight -> RL run from the best step -> held-out evals of both, common seeds', async () => {
    if (!distBuilt()) throw new Error('dist/workers is missing: run npm run build first');
    if (!existsSync(path.join(paths.tasks(), 'train.jsonl'))) throw new Error(`no task set at ${paths.tasks()}: run bash infra/tasks.sh`);
    const o = {
      ...AGENT_DEFAULTS, seeds: 1, steps: 1, batch: 2, rollouts: 2, refillRounds: 1, demos: 6, demoHeldOut: 1, sftSteps: 2, sftBatch: 3, sftLr: 1e-2,
      preflightTasks: 2, preflightK: 2, evalUnseen: 1, evalRandom: 1, k: 2,
    };
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-learn-agent-'));
    const r = await runAgentBench(o, dir, { assumeSignal: true });

    // The task sets share no task (read from the files the runs used).
    const sets = ['demo-tasks.jsonl', 'rl-pool.jsonl', 'heldout-plain.jsonl'].map((f) => ids(path.join(dir, f)));
    expect(new Set(sets.flat()).size).toBe(sets.flat().length);
    expect(ids(path.join(dir, 'preflight.jsonl')).every((t) => sets[1]!.includes(t))).toBe(true);

    // Path-only demonstrations: every kept one answers one path, no line number, no function.
    expect(r.sft.demosKept).toBeGreaterThanOrEqual(o.demoHeldOut + 1);
    const answers = readFileSync(path.join(dir, 'demos.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => {
      const t = JSON.parse(l) as { messages: { tool_calls?: { function: { name: string; arguments: string } }[] }[] };
      return JSON.parse(t.messages.flatMap((m) => m.tool_calls ?? []).find((c) => c.function.name === 'result')!.function.arguments) as { files: string[]; functions?: string[] };
    });
    for (const a of answers) {
      expect(a.files).toHaveLength(1);
      expect(a.files[0]).toMatch(/^[\w/]+\.py$/);
      expect(a.functions).toBeUndefined();
    }

    // SFT: a held-out loss per step, the warm start at its lowest; the adapter moved from PEFT's zero init.
    expect(r.sft.records.map((s) => s.step)).toEqual([0, 1]);
    expect(r.sft.heldOutLoss).toHaveLength(2);
    for (const l of r.sft.heldOutLoss) expect(l).toBeGreaterThan(0);
    expect(r.sft.heldOutLoss[r.sft.bestStep]).toBe(Math.min(...r.sft.heldOutLoss));
    const warmB = loraB(r.sft.runId, r.sft.bestStep);
    expect([...warmB.values()].some((b) => b.some((byte) => byte !== 0))).toBe(true);

    // The pre-flight's rate is its trajectories': the warm start's episodes on the RL-pool tasks, reward >= 1.
    const trajRoot = path.join(paths.artifacts(), 'runs', r.sft.runId, 'evals', 'trajectories');
    const pool = ids(path.join(dir, 'preflight.jsonl'));
    const rewardsByTask = pool.map((t) => readdirSync(path.join(trajRoot, `eval-v${r.sft.version}-${t}`)).filter((f) => f.endsWith('.json'))
      .map((f) => (JSON.parse(readFileSync(path.join(trajRoot, `eval-v${r.sft.version}-${t}`, f), 'utf8')) as { reward?: { total: number } }).reward?.total ?? 0));
    const poolRewards = rewardsByTask.flat();
    expect(r.preflight.episodes).toBe(poolRewards.length);
    expect(r.preflight.passed).toBe(poolRewards.filter((x) => x >= 1).length);
    // Within-task variance: the tasks whose k samples did not all score alike.
    expect(r.preflight.tasks).toBe(pool.length);
    expect(r.preflight.informativeTasks).toBe(rewardsByTask.filter((g) => Math.max(...g) !== Math.min(...g)).length);

    expect(r.arms.map((a) => a.arm).sort()).toEqual(['control', 'rl']);
    const rl = r.arms.find((a) => a.arm === 'rl')!;
    const control = r.arms.find((a) => a.arm === 'control')!;
    expect(control).toMatchObject({ runId: r.sft.runId, finalVersion: r.sft.version, records: [] });
    const step = rl.records[0]!;
    expect(rl.records.map((s) => s.step)).toEqual([0]);
    expect(step.lineage?.trainer.init_from).toMatchObject({ run_id: r.sft.runId, step: r.sft.bestStep });
    // Each step says what it learned from and which version sampled it (async_level 0: the warm start, v0).
    expect(step.sampling_policy_version).toBe(0);
    expect(step.groups).toBeGreaterThanOrEqual(o.batch);
    expect(step.informative_groups).toBeGreaterThanOrEqual(0);
    for (const a of r.arms) {
      // k = 2 on the unseen package's task and the random row, each read from its trajectory.
      expect(a.episodes.map((e) => `${e.split}#${e.sample}`).sort()).toEqual(['random#0', 'random#1', 'unseen#0', 'unseen#1']);
      for (const e of a.episodes) expect(e.behaviour.turns).toBeGreaterThanOrEqual(1);
    }
    // Common random numbers: the two arms' sweeps gave each task and sample the same seed, the samples of a task different ones.
    const [rlSeeds, controlSeeds] = await Promise.all([sweepSeeds(rl.evalWorkflowId!), sweepSeeds(control.evalWorkflowId!)]);
    expect(rlSeeds.size).toBe(4);
    expect([...rlSeeds].sort()).toEqual([...controlSeeds].sort());
    for (const t of ids(path.join(dir, 'heldout-plain.jsonl'))) expect(rlSeeds.get(`${t}#0`)).not.toBe(rlSeeds.get(`${t}#1`));
    // The RL run's lr moved the warm start exactly when its step trained on an informative group.
    const trainedStep = (step.informative_groups ?? 0) > 0;
    if (trainedStep) expect(same(loraB(rl.runId), warmB)).toBe(false);
    else expect(existsSync(path.join(paths.artifacts(), 'runs', rl.runId, 'checkpoints')) ? same(loraB(rl.runId), warmB) : true).toBe(true);

    const section = agentSection(o, r, 'npm run bench:learn -- (short)').join('\n');
    expect(section).toContain(`Pre-flight: the warm start on ${r.preflight.episodes} RL-pool episodes passed ${r.preflight.passed}`);
    expect(section).toContain('Paired per-task difference on the primary split, RL − control, by training seed: seed 0');
    expect(section).toContain('control: the warm start (SFT only)');
    expect(r.reports).toHaveLength(1);
    expect(readFileSync(r.reports[0]!, 'utf8')).toContain(rl.runId);
  }, 25 * 60_000);
});
