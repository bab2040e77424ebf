import { comparePoints, faultDue, FAULT_KINDS, INCIDENT_KINDS, PARTITION_KINDS, planFaults, REPLICA_LOSS, STEP_PHASES, TARGET_PHASES, type RunPhase } from '../../../src/soak/schedule';
import { CUDA_STYLE_ERROR, SLOW_SAVE_STALL_S, partitionRule, slowDiskEnv } from '../../../src/soak/faults';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { parse } from 'smol-toml';
import { configFor, percentile, soakPlan } from '../../../src/soak/run';

describe('soak fault schedule', () => {
  test('20 faults over 20 steps cover every kind and every target phase, never the last step', () => {
    const plan = planFaults({ seed: 1, faults: 20, steps: 20 });
    expect(plan).toHaveLength(20);
    expect(new Set(plan.map((f) => f.kind))).toEqual(new Set(FAULT_KINDS));
    expect(new Set(plan.map((f) => f.phase))).toEqual(new Set(TARGET_PHASES));
    expect(Math.max(...plan.map((f) => f.step))).toBeLessThan(19);
    expect(TARGET_PHASES).toEqual(expect.arrayContaining(['saving', 'weight-sync']));
  });

  test('in step order, then phase order, indexed in that order', () => {
    const plan = planFaults({ seed: 7, faults: 12, steps: 4 });
    for (let i = 1; i < plan.length; i++) {
      const a = plan[i - 1]!;
      const b = plan[i]!;
      expect(a.step < b.step || (a.step === b.step && STEP_PHASES.indexOf(a.phase) <= STEP_PHASES.indexOf(b.phase))).toBe(true);
    }
    expect(plan.map((f) => f.index)).toEqual(plan.map((_, i) => i));
  });

  test('the same seed gives the same schedule; another seed another', () => {
    expect(planFaults({ seed: 3, faults: 10, steps: 10 })).toEqual(planFaults({ seed: 3, faults: 10, steps: 10 }));
    expect(planFaults({ seed: 3, faults: 10, steps: 10 })).not.toEqual(planFaults({ seed: 4, faults: 10, steps: 10 }));
  });

  test('a short soak (5 steps, 3 faults) draws 3 different kinds', () => {
    const plan = planFaults({ seed: 1, faults: 3, steps: 5 });
    expect(new Set(plan.map((f) => f.kind)).size).toBe(3);
  });

  test("CI's soak (seed 56) hangs the trainer mid-step and kills the workflow worker in trainer.save", () => {
    expect(planFaults({ seed: 56, faults: 3, steps: 5 }).map((f) => `${f.kind}@${f.step}:${f.phase}`))
      .toEqual(['restart-temporal@1:rollouts', 'kill-main@2:saving', 'hang-trainer@3:training']);
  });

  test('bad options are refused with the flag named', () => {
    expect(() => planFaults({ seed: 1, faults: 3, steps: 1 })).toThrow(/--steps/);
    expect(() => planFaults({ seed: 1, faults: -1, steps: 5 })).toThrow(/--faults/);
  });

  test('the run has moved on once step, phase or finished rollouts advance', () => {
    const at = { step: 1, phase: 'rollouts' as const, rolloutsDone: 1 };
    expect(comparePoints({ ...at, rolloutsDone: 2 }, at)).toBe(1);
    expect(comparePoints({ ...at, phase: 'building-batch' }, at)).toBe(1);
    expect(comparePoints({ step: 2, phase: 'idle', rolloutsDone: 0 }, at)).toBe(1);
    expect(comparePoints(at, at)).toBe(0);
    expect(comparePoints({ ...at, phase: 'sampling' }, at)).toBe(-1);
  });

  test('percentile is nearest-rank', () => {
    expect(percentile([5, 1, 3, 2, 4], 50)).toBe(3);
    expect(percentile([5, 1, 3, 2, 4], 95)).toBe(5);
    expect(percentile([], 50)).toBeNaN();
  });
});

describe('soak partitions and replica loss', () => {
  test('partition kinds are opt-in: the default schedule of a seed is what it was (no partition in it)', () => {
    const plan = planFaults({ seed: 56, faults: 3, steps: 5 });
    expect(plan.map((f) => f.kind)).toEqual(expect.not.arrayContaining([...PARTITION_KINDS, REPLICA_LOSS]));
    expect(new Set(FAULT_KINDS)).not.toContain('partition-inference');
  });

  test('with --partitions every partition kind is drawn once the faults cover a round', () => {
    const kinds = [...FAULT_KINDS, ...PARTITION_KINDS];
    const plan = soakPlan({ seed: 1, faults: kinds.length, steps: 12, kinds });
    expect(new Set(plan.map((f) => f.kind))).toEqual(new Set(kinds));
  });

  test('--replica-loss loses one replica once, during rollouts a third of the way in, in step order with the rest', () => {
    const plan = soakPlan({ seed: 3, faults: 6, steps: 10, replicaLoss: true });
    const lost = plan.filter((f) => f.kind === REPLICA_LOSS);
    expect(lost).toEqual([expect.objectContaining({ step: 3, phase: 'rollouts' })]);
    expect(plan).toHaveLength(7);
    expect(plan.map((f) => f.index)).toEqual(plan.map((_, i) => i));
    for (let i = 1; i < plan.length; i++) expect(plan[i]!.step).toBeGreaterThanOrEqual(plan[i - 1]!.step);
  });

  test('a partition drops the port on the loopback (a hang, not a refusal), under a comment healing finds', () => {
    expect(partitionRule(7233)).toEqual(['INPUT', '-i', 'lo', '-p', 'tcp', '--dport', '7233', '-m', 'comment', '--comment', 'ratchet-soak-partition-7233', '-j', 'DROP']);
  });
});

describe("the soak's config", () => {
  test('with a replica to lose, a weight sync goes on at one replica of two (the default majority is 2 of 2: the run would wait forever)', () => {
    const lossy = parse(readFileSync(configFor(4, ['http://127.0.0.1:8001/v1']), 'utf8')) as { inference: { base_urls: string[]; sync_quorum?: number } };
    expect(lossy.inference.base_urls).toHaveLength(2);
    expect(lossy.inference.sync_quorum).toBe(1);
    const plain = parse(readFileSync(configFor(4), 'utf8')) as { inference: { sync_quorum?: number } };
    expect(plain.inference.sync_quorum).toBeUndefined();
  });
});

describe('soak incidents an operator fixes (issue 39)', () => {
  test('incident kinds are opt-in: a seed\'s default schedule is unchanged; with --incidents every one is drawn once the faults cover a round', () => {
    expect(planFaults({ seed: 56, faults: 3, steps: 5 }).map((f) => f.kind)).toEqual(['restart-temporal', 'kill-main', 'hang-trainer']);
    expect(new Set<string>(FAULT_KINDS)).not.toContain('slow-save');
    const kinds = [...FAULT_KINDS, ...INCIDENT_KINDS];
    const plan = soakPlan({ seed: 1, faults: 40, steps: 21, kinds });
    expect(new Set(plan.map((f) => f.kind))).toEqual(new Set(kinds));
    // 40 faults over 12 kinds: each incident class at least 3 times (store credential rotation among them).
    expect(INCIDENT_KINDS).toContain('store-credentials');
    for (const k of INCIDENT_KINDS) expect(plan.filter((f) => f.kind === k).length).toBeGreaterThanOrEqual(3);
  });

  test('a soak with slow saves runs with trainer_stall_s low enough for a slow save to outlast it; others keep the default', () => {
    const slow = parse(readFileSync(configFor(4, [], { trainerStallS: SLOW_SAVE_STALL_S }), 'utf8')) as { liveness?: { trainer_stall_s?: number } };
    expect(slow.liveness?.trainer_stall_s).toBe(SLOW_SAVE_STALL_S);
    expect(SLOW_SAVE_STALL_S).toBeGreaterThanOrEqual(60); // the schema's least
    const plain = parse(readFileSync(configFor(4), 'utf8')) as { liveness?: unknown };
    expect(plain.liveness).toBeUndefined();
  });

  test('the slow disk slows reads of the run\'s checkpoints until its window ends, through the tests\' sitecustomize', () => {
    const env = slowDiskEnv('/runs/r1/checkpoints/', 6, 1_900_000_000);
    expect(env.PYTHONPATH!.split(':')[0]).toMatch(/trainer\/tests\/slow_disk$/);
    expect(readFileSync(path.join(env.PYTHONPATH!.split(':')[0]!, 'sitecustomize.py'), 'utf8')).toContain('RATCHET_TEST_SLOW_READ_UNTIL');
    expect(env).toMatchObject({ RATCHET_TEST_SLOW_READ_UNDER: '/runs/r1/checkpoints/', RATCHET_TEST_SLOW_READ_S: '6', RATCHET_TEST_SLOW_READ_UNTIL: '1900000000' });
  });

  test('store-credentials alone (--kinds store-credentials): every fault is one, spread over the steps before the last', () => {
    const plan = soakPlan({ seed: 2, faults: 4, steps: 5, kinds: ['store-credentials'] });
    expect(plan.map((f) => f.kind)).toEqual(['store-credentials', 'store-credentials', 'store-credentials', 'store-credentials']);
    expect(new Set(plan.map((f) => f.step))).toEqual(new Set([0, 1, 2, 3]));
  });

  test('a soak on the soak\'s MinIO: its run config names the s3:// url and the endpoint, never a credential; others stay on the local store', () => {
    const artifacts = { url: 's3://ratchet/soak-abc', endpoint: 'http://127.0.0.1:9100' };
    const onS3 = parse(readFileSync(configFor(4, [], { artifacts }), 'utf8')) as { artifacts?: Record<string, unknown> };
    expect(onS3.artifacts).toEqual(artifacts);
    const plain = parse(readFileSync(configFor(4, [], { trainerStallS: SLOW_SAVE_STALL_S }), 'utf8')) as { artifacts?: unknown };
    expect(plain.artifacts).toBeUndefined();
  });

  test('the injected trainer error has no type of ours: torch\'s words for a CUDA fault', () => {
    expect(CUDA_STYLE_ERROR).toMatch(/^CUDA error: /);
  });
});

describe('faultDue: when a planned fault hits the run', () => {
  const at = (step: number, phase: RunPhase['phase'], prefetchedStep?: number): RunPhase => ({ step, maxSteps: 42, phase, prefetchedStep });
  const fault = { step: 10, phase: 'saving' as const };

  test('on time: from its planned step, in its planned phase only', () => {
    expect(faultDue(at(9, 'saving'), fault)).toBe(false);
    expect(faultDue(at(10, 'training'), fault)).toBe(false);
    expect(faultDue(at(10, 'saving'), fault)).toBe(true);
  });

  test('late (the run is past its planned step): the next target phase, so queued faults land before the run ends', () => {
    expect(faultDue(at(11, 'training'), fault)).toBe(true);
    expect(faultDue(at(11, 'weight-sync'), fault)).toBe(true);
    // Not a phase a fault is aimed at (too short to be seen by polling).
    expect(faultDue(at(11, 'metrics'), fault)).toBe(false);
    // With async_level >= 1, the next step's rollouts running ahead count as the rollouts phase.
    expect(faultDue(at(11, 'metrics', 12), fault)).toBe(true);
  });

  test('the last step is never faulted, on time or late', () => {
    expect(faultDue(at(41, 'saving'), { step: 41, phase: 'saving' })).toBe(false);
    expect(faultDue(at(41, 'training'), fault)).toBe(false);
    expect(faultDue(at(40, 'training'), fault)).toBe(true);
  });
});
