/**
 * bench:learn's short version (CI), the multi-turn agent case on the real stack, at the
 * smallest sizes: demonstrations by the scripted solver on real sandboxes, an SftRun of two
 * steps, then one training seed's RL run of one step from its adapter, and an EvalSweep of it
 * and of the warm start (the control: the SFT-only policy) on one task of the held-out package
 * and one random row. Whether it learns is the long bench's question (`npm run bench:learn`,
 * out of CI); this checks that the bench measures what it says, from the files on disk, not
 * from the trainer's own metrics: the SFT adapter moved from PEFT's zero init, the RL run's
 * moved from it exactly when its step had a signal, and the held-out episodes of both arms are
 * real multi-turn episodes. That an lr-0 run would leave the warm start as it is, byte for
 * byte, is trainer/tests/test_init_adapter.py's.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { AGENT_DEFAULTS, runAgentBench } from '../../src/bench/learnAgentBench';
import { agentSection } from '../../src/bench/learnAgentSection';
import { paths } from '../../src/shared/paths';
import { describeWithStack } from '../helpers/stack';
import { distBuilt } from './trainrunStack';

/** The LoRA B tensors of a run's newest checkpoint, by name, as raw bytes (PEFT starts every B at zero). */
function loraB(runId: string): Map<string, Buffer> {
  const dir = path.join(paths.artifacts(), 'runs', runId, 'checkpoints');
  const newest = readdirSync(dir).filter((d) => d.startsWith('step-')).sort((a, b) => Number(a.split('-')[1]) - Number(b.split('-')[1])).pop();
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

describeWithStack('bench:learn (short): SFT warm start, then an RL run against the warm start, multi-turn', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  test('demos -> SftRun -> RL run from its adapter -> held-out evals of both; adapters checked on disk', async () => {
    if (!distBuilt()) throw new Error('dist/workers is missing: run npm run build first');
    if (!existsSync(path.join(paths.tasks(), 'train.jsonl'))) throw new Error(`no task set at ${paths.tasks()}: run bash infra/tasks.sh`);
    // A warm start strong enough that some episodes call tools (two SFT steps at a high learning rate), so the
    // step's groups usually differ in reward; two groups of three in the step.
    const o = {
      ...AGENT_DEFAULTS, seeds: 1, steps: 1, batch: 2, rollouts: 3, demos: 8, sftSteps: 2, sftBatch: 4, sftLr: 1e-2,
      evalUnseen: 1, evalRandom: 1, k: 1,
    };
    const r = await runAgentBench(o, mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-learn-agent-')));

    expect(r.sft.demosKept).toBeGreaterThanOrEqual(1);
    const sftB = loraB(r.sft.runId);
    expect([...sftB.values()].some((b) => b.some((byte) => byte !== 0))).toBe(true);

    expect(r.arms.map((a) => `${a.arm}-${a.seed}`).sort()).toEqual(['control-0', 'rl-0']);
    const rl = r.arms.find((a) => a.arm === 'rl')!;
    const control = r.arms.find((a) => a.arm === 'control')!;
    expect(rl.records.map((s) => s.step)).toEqual([0]);
    expect(rl.records[0]!.lineage?.trainer.init_from?.run_id).toBe(r.sft.runId);
    // The control is the warm start's own final version, evaluated: it trained nothing.
    expect(control).toMatchObject({ runId: r.sft.runId, finalVersion: 2, records: [] });
    for (const a of r.arms) {
      // One episode per held-out task (k = 1): the unseen package's and the random row's, each read from its trajectory.
      expect(a.episodes.map((e) => e.split).sort()).toEqual(['random', 'unseen']);
      for (const e of a.episodes) expect(e.behaviour.turns).toBeGreaterThanOrEqual(1);
    }
    // The RL run's lr moves the warm start exactly when its step had an advantage to follow (a group whose
    // episodes scored alike has none: zero gradient, and Adam moves nothing on zero gradients).
    const uniformGroups = (rl.records[0]!.batch?.summary as { uniform_groups?: number } | undefined)?.uniform_groups ?? 0;
    const signal = rl.records[0]!.reward_std > 0 && uniformGroups < o.batch;
    expect(same(loraB(rl.runId), sftB)).toBe(!signal);
    expect(r.sft.records.map((s) => s.step)).toEqual([0, 1]);

    const section = agentSection(o, r, 'npm run bench:learn -- (short)').join('\n');
    expect(section).toContain(`unseen package (${o.heldOutPackage})`);
    expect(section).toContain('Paired per-task difference, RL − control');
    expect(section).toContain('control: the warm start (SFT only)');
    expect(r.reports).toHaveLength(1);
    expect(readFileSync(r.reports[0]!, 'utf8')).toContain(rl.runId);
  }, 25 * 60_000);
});
