/**
 * Runs share workers fairly (docs/architecture.md): the real StepRollouts and EvalSweep
 * workflows on a real dev server started with Ratchet's dynamic config, against ONE rollout
 * worker with 2 slots and trivial rollouts.
 * - Three runs of different sizes (40, 10 and 10 rollouts in flight) and weights (1, 1, 2)
 *   each get a share of dispatches within 20% of weight / total weight while all have backlog.
 * - An eval sweep started during a training step does not delay the step's rollouts by more
 *   than one round of the worker's slots.
 * Remove the keys (src/shared/fairness.ts) and both fail: the server falls back to FIFO.
 */
import { Client } from '@temporalio/client';
import { Context } from '@temporalio/activity';
import { Worker } from '@temporalio/worker';
import { describeWithStack } from '../../helpers/stack';
import type { RolloutInput, StepRolloutsInput } from '../../../src/contracts';
import type { RolloutChunkInput, RolloutChunkResult } from '../../../src/contracts/chunks';
import type { EvalPlan, EvalSweepInput } from '../../../src/contracts/eval';
import { EVAL_STEP } from '../../../src/shared/steps';
import { ref } from '../../helpers/workflowFakes';
import { useFakeWorld } from '../../helpers/fakeWorld';
import { ConfigError, parseRunConfig } from '../../../src/config/load';
import { evalRolloutOptions } from '../../../src/workflows/proxies';
import {
  DEFAULT_FAIRNESS_WEIGHT, EVAL_PRIORITY, FAIRNESS_KEY_MAX_BYTES, FAIRNESS_WEIGHT_MAX, FAIRNESS_WEIGHT_MIN, TRAINING_PRIORITY,
  fairnessKeyOf, trainingPriority,
} from '../../../src/shared/fairness';

jest.setTimeout(90_000);

const SLOTS = 2;

/** A rollout the worker started: when the workflow scheduled it (server clock, same host) and when it started. */
interface Dispatch { runId: string; step: number; scheduledAt: number; at: number }

describe('priority and fairness keys (src/shared/fairness.ts)', () => {
  test('training: the run id is the fairness key, the config\'s weight its weight, the server\'s default priority', () => {
    expect(trainingPriority('smoke-20261125T101500', 2)).toEqual({ priorityKey: TRAINING_PRIORITY, fairnessKey: 'smoke-20261125T101500', fairnessWeight: 2 });
    expect(trainingPriority('r').fairnessWeight).toBe(DEFAULT_FAIRNESS_WEIGHT);
    expect(TRAINING_PRIORITY).toBe(3);
  });

  test('eval sweeps run below training (a larger priority key is a lower priority), keyed by the run', () => {
    expect(EVAL_PRIORITY).toBeGreaterThan(TRAINING_PRIORITY);
    expect(EVAL_PRIORITY).toBeLessThanOrEqual(5); // the server's default number of levels
    const o = evalRolloutOptions('smoke-1');
    expect(o).toMatchObject({ taskQueue: 'ratchet-rollout', priority: { priorityKey: EVAL_PRIORITY, fairnessKey: 'smoke-1' } });
  });

  test('a run id over Temporal\'s 64-byte key limit becomes a shorter key, still one per run', () => {
    const a = `${'x'.repeat(70)}-a`;
    const b = `${'x'.repeat(70)}-b`;
    expect(Buffer.byteLength(fairnessKeyOf(a))).toBeLessThanOrEqual(FAIRNESS_KEY_MAX_BYTES);
    expect(fairnessKeyOf(a)).not.toBe(fairnessKeyOf(b));
    expect(fairnessKeyOf(a)).toBe(fairnessKeyOf(a));
    expect(Buffer.byteLength(fairnessKeyOf('é'.repeat(40)))).toBeLessThanOrEqual(FAIRNESS_KEY_MAX_BYTES);
    expect(fairnessKeyOf('y'.repeat(64))).toBe('y'.repeat(64));
  });

  test('[orchestrator] fairness_weight: default 1; outside its bounds a config error naming the key', () => {
    const base = '[[env]]\nid = "debug"\n';
    expect(parseRunConfig(base, 'x.toml').orchestrator.fairness_weight).toBe(1);
    expect(parseRunConfig(`${base}[orchestrator]\nfairness_weight = 2.5\n`, 'x.toml').orchestrator.fairness_weight).toBe(2.5);
    for (const bad of [0, -1, FAIRNESS_WEIGHT_MIN / 2, FAIRNESS_WEIGHT_MAX * 2]) {
      expect(() => parseRunConfig(`${base}[orchestrator]\nfairness_weight = ${bad}\n`, 'x.toml')).toThrow(ConfigError);
      expect(() => parseRunConfig(`${base}[orchestrator]\nfairness_weight = ${bad}\n`, 'x.toml')).toThrow(/x\.toml: orchestrator\.fairness_weight: Number must be/);
    }
  });
});

describeWithStack('runs share workers fairly (real dev server, one rollout worker)', ['temporalBinary'], () => {
  const world = useFakeWorld({ namespaces: ['shares', 'priority'] });

  /**
   * The order in which the rollout worker started rollouts (an eval's) and chunks of one rollout (a
   * training step's, whose manifest ref names the run: stepInput); each takes rolloutMs.
   */
  function rolloutWorker(dispatches: Dispatch[], namespace: string, rolloutMs: number) {
    return Worker.create({
      connection: world.env.nativeConnection, namespace, taskQueue: ROLLOUT_QUEUE, maxConcurrentActivityTaskExecutions: SLOTS,
      activities: {
        rollout: async (input: RolloutInput) => {
          dispatches.push({ runId: input.runId, step: input.step, scheduledAt: Context.current().info.scheduledTimestampMs, at: Date.now() });
          await new Promise((r) => setTimeout(r, rolloutMs));
          return { reward: 1 };
        },
        rolloutChunk: async (input: RolloutChunkInput): Promise<RolloutChunkResult> => {
          const runId = input.manifest.uri.replace('file:///fake/manifest-', '');
          dispatches.push({ runId, step: 0, scheduledAt: Context.current().info.scheduledTimestampMs, at: Date.now() });
          await new Promise((r) => setTimeout(r, rolloutMs));
          return { summaries: ref(`chunk-${runId}-${input.start}`), count: input.end - input.start, ran: input.end - input.start };
        },
      },
    });
  }

  function mainWorker(namespace: string) {
    return Worker.create({
      connection: world.env.nativeConnection, namespace, taskQueue: 'ratchet', workflowBundle: world.bundle, maxConcurrentActivityTaskExecutions: 20,
      activities: {
        storeRolloutSummaries: async () => ref('summaries'),
        evalPlan: async (input: EvalSweepInput): Promise<EvalPlan> => evalPlan(input.runId, 200),
        evalRecord: async () => ({ version: 0 }),
      },
    });
  }

  /** A step of `rollouts` chunks of one rollout each, in one StepRollouts (at most 1,000 chunks: no shard). */
  function stepInput(runId: string, rollouts: number, inFlight: number, weight: number): StepRolloutsInput {
    return {
      runId, step: 0, policyVersion: 0, modelName: 'm', keepFromVersion: 0, taskSetDir: '/tmp', seed: 1,
      tasks: [], manifest: ref(`manifest-${runId}`), taskCount: rollouts,
      config: {
        orchestrator: { rollouts_per_example: 1, rollouts_per_chunk: 1, chunks_per_shard: 1000, max_concurrent_rollouts: inFlight, fairness_weight: weight },
        inference: { base_urls: ['http://127.0.0.1:1/v1'] }, env: [{ args: {}, rubric: {} }], sampling: {}, sandbox: {},
      },
    } as unknown as StepRolloutsInput;
  }

  /** The workflows' literal rollout queue; each test has a namespace of its own, so none sees the other's leftover tasks. */
  const ROLLOUT_QUEUE = 'ratchet-rollout';
  const clientFor = (namespace: string) => new Client({ connection: world.env.connection, namespace });

  test('three runs of different sizes and weights each get their weighted share of one worker', async () => {
    const dispatches: Dispatch[] = [];
    const runs = [
      { runId: 'big-w1', inFlight: 40, weight: 1 },
      { runId: 'small-w1', inFlight: 10, weight: 1 },
      { runId: 'small-w2', inFlight: 10, weight: 2 },
    ];
    const client = clientFor('shares');
    const main = await mainWorker('shares');
    const mainRun = main.run();
    // Every run's window is scheduled before the rollout worker polls: a backlog for each.
    const handles = await Promise.all(runs.map((r) => client.workflow.start('StepRollouts', {
      taskQueue: 'ratchet', workflowId: `${r.runId}-step-0-rollouts`, args: [stepInput(r.runId, 1000, r.inFlight, r.weight)],
    })));
    await waitForBacklog(client, runs.reduce((n, r) => n + r.inFlight, 0));
    const worker = await rolloutWorker(dispatches, 'shares', 15);
    const workerRun = worker.run();
    const MEASURED = 360;
    try {
      await until(() => dispatches.length >= MEASURED + 20, 40_000);
    } finally {
      await Promise.all(handles.map((h) => h.terminate('measured').catch(() => undefined)));
      worker.shutdown();
      main.shutdown();
      await Promise.all([workerRun, mainRun]);
    }
    // Every run keeps a backlog throughout (1,000 rollouts each); the first 20 dispatches settle the counters.
    const window = dispatches.slice(20, 20 + MEASURED);
    const totalWeight = runs.reduce((w, r) => w + r.weight, 0);
    const shares = runs.map((r) => ({
      runId: r.runId, inFlight: r.inFlight, weight: r.weight,
      share: window.filter((d) => d.runId === r.runId).length / window.length,
      expected: r.weight / totalWeight,
    }));
    console.warn(`dispatch shares over ${window.length} rollouts on ${SLOTS} slots:\n` +
      shares.map((s) => `  ${s.runId} (${s.inFlight} in flight, weight ${s.weight}): ${(100 * s.share).toFixed(1)}% (expected ${(100 * s.expected).toFixed(1)}%)`).join('\n'));
    for (const s of shares) {
      expect({ runId: s.runId, withinTwentyPercent: Math.abs(s.share - s.expected) <= 0.2 * s.expected, share: s.share })
        .toEqual({ runId: s.runId, withinTwentyPercent: true, share: s.share });
    }
  });

  test('an eval sweep started during a training step delays its rollouts by at most one round of slots', async () => {
    const dispatches: Dispatch[] = [];
    const client = clientFor('priority');
    const main = await mainWorker('priority');
    const mainRun = main.run();
    // Rollouts long enough that the step's workflow tasks refill its window before its backlog drains, as real ones (minutes) do.
    const worker = await rolloutWorker(dispatches, 'priority', 80);
    const workerRun = worker.run();
    const TRAINING = 120;
    try {
      const step = await client.workflow.start('StepRollouts', {
        taskQueue: 'ratchet', workflowId: 'train-run-step-0-rollouts', args: [stepInput('train-run', TRAINING, 8, 1)],
      });
      await until(() => dispatches.length >= 30, 20_000);
      // Another run's sweep, so the fairness keys differ: only priority keeps it behind training.
      const sweep = await client.workflow.start('EvalSweep', {
        taskQueue: 'ratchet', workflowId: 'eval-other-run', args: [{ runId: 'other-run', newest: 1, maxConcurrent: 20 } satisfies EvalSweepInput],
      });
      const evalStartedAt = Date.now();
      await step.result();
      const training = dispatches.filter((d) => d.runId === 'train-run');
      const trainingDoneAt = Math.max(...training.map((d) => d.at));
      const evals = dispatches.filter((d) => d.step === EVAL_STEP && d.at <= trainingDoneAt);
      const trainingAfterEval = training.filter((d) => d.at >= evalStartedAt).length;
      console.warn(`training rollouts dispatched after the sweep started: ${trainingAfterEval}; eval rollouts (of ${dispatches.filter((d) => d.step === EVAL_STEP).length} dispatched by the end) ` +
        `dispatched before the step's last: ${evals.length} (allowed: ${SLOTS}, one round of the worker's slots)`);
      expect(trainingAfterEval).toBeGreaterThan(60);
      expect(evals.length).toBeLessThanOrEqual(SLOTS);
      await sweep.terminate('measured');
    } finally {
      worker.shutdown();
      main.shutdown();
      await Promise.all([workerRun, mainRun]);
    }
  });

  async function waitForBacklog(client: Client, n: number): Promise<void> {
    await until(async () => {
      const d = await client.workflowService.describeTaskQueue({
        namespace: client.options.namespace, taskQueue: { name: ROLLOUT_QUEUE }, taskQueueType: 2 /* ACTIVITY */, reportStats: true,
      });
      return Number(d.stats?.approximateBacklogCount ?? 0) >= n;
    }, 20_000);
  }
});

function evalPlan(runId: string, tasks: number): EvalPlan {
  return {
    runId, taskset: { name: 'heldout', path: '/tmp/h.jsonl', hash: 'h', tasks }, k: 1, versions: [0], skipped: [],
    tasks: Array.from({ length: tasks }, (_, i) => ({ instanceId: `e${i}`, datasetPath: '/tmp/h.jsonl', hasTests: true })),
    envId: 'debug', taskSetDir: '/tmp', sampling: {}, envArgs: {}, rubric: {}, sandbox: {}, inferenceBaseUrl: 'http://127.0.0.1:1/v1',
    servedModel: 'm', seed: 1, adapters: {},
  } as unknown as EvalPlan;
}

async function until(cond: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`condition not met in ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
