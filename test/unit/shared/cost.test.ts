/**
 * The cost ledger's pure parts (docs/operations.md, "What a run costs and budgets"): summing figures,
 * which budget a run has reached, the [budget] section and `set --budget`, a step's cost from its
 * rollouts' summaries and the trainer's metrics. Expected figures are computed here from the inputs.
 */
import { ConfigError, parseRunConfig } from '../../../src/config/load';
import { COST_KEYS, addCost, budgetsOf, budgetsOfSection, exhaustedBudget, hasBudgets, zeroCost } from '../../../src/shared/cost';
import { CostFigures, StepRecord } from '../../../src/contracts/records';
import type { RolloutSummary } from '../../../src/contracts/trajectory';
import { rolloutStats } from '../../../src/rollouts/stats';
import { stepCost } from '../../../src/workflows/stepRecord';
import { validateSettings } from '../../../src/workflows/runControl';
import { parseBudget } from '../../../src/cli/set';
import { costLine } from '../../../src/cli/follow';
import { meterSandboxes } from '../../../src/rollouts/cost';
import type { Sandbox } from '../../../src/sandbox/interface';

const summary = (i: number, sandbox?: RolloutSummary['sandbox']): RolloutSummary => ({
  task_id: `t${i}`, group_id: 'g', rollout_index: i, trajectory: { uri: 'file:///x', sha256: 'a', bytes: 1 },
  reward: 0, components: {}, stop_reason: i === 0 ? 'infra_error' : 'completed', policy_version: 0,
  completion_tokens: 10 + i, tool_calls: 0, model_ms: 0, tools_ms: 0, sandbox_ms: 0, ...(sandbox ? { sandbox } : {}),
});

describe('cost figures', () => {
  test('addCost sums key by key; a missing key counts 0', () => {
    const a = { ...zeroCost(), sandbox_cpu_s: 1.5, tokens_generated: 10 };
    expect(addCost(a, { sandbox_cpu_s: 0.25, temporal_events: 3 })).toEqual({ ...zeroCost(), sandbox_cpu_s: 1.75, tokens_generated: 10, temporal_events: 3 });
    expect(addCost(undefined, undefined)).toEqual(zeroCost());
    expect(Object.keys(zeroCost()).sort()).toEqual([...COST_KEYS].sort());
  });

  test('a budget is reached at equality; the first reached is named', () => {
    const cost = { ...zeroCost(), sandbox_cpu_s: 100, tokens_generated: 50 };
    expect(exhaustedBudget(cost, {})).toBeUndefined();
    expect(exhaustedBudget(cost, { sandbox_cpu_s: 101 })).toBeUndefined();
    expect(exhaustedBudget(cost, { sandbox_cpu_s: 100 })).toEqual({ key: 'sandbox_cpu_s', spent: 100, budget: 100 });
    expect(exhaustedBudget(cost, { tokens_generated: 20, sandbox_cpu_s: 500 })).toEqual({ key: 'tokens_generated', spent: 50, budget: 20 });
    expect(hasBudgets({})).toBe(false);
    expect(hasBudgets({ trainer_gpu_s: 1 })).toBe(true);
  });

  test('a `set` raise overrides the config\'s budget for that figure only', () => {
    const section = budgetsOfSection({ max_sandbox_cpu_s: 10, max_tokens_trained: 5 });
    expect(section).toEqual({ sandbox_cpu_s: 10, tokens_trained: 5 });
    expect(budgetsOf(section, { sandbox_cpu_s: 20 })).toEqual({ sandbox_cpu_s: 20, tokens_trained: 5 });
  });
});

describe('[budget] and set --budget', () => {
  const toml = (budget: string) => `[[env]]\nid = "swe-grep"\n\n[budget]\n${budget}\n`;

  test('a valid [budget] parses', () => {
    expect(parseRunConfig(toml('max_sandbox_cpu_s = 7200\nmax_tokens_generated = 1e6'), 'x.toml').budget).toEqual({ max_sandbox_cpu_s: 7200, max_tokens_generated: 1e6 });
    expect(parseRunConfig('[[env]]\nid = "swe-grep"\n', 'x.toml').budget).toBeUndefined();
  });

  test.each([
    ['max_sandbox_cpu_s = 0', /budget\.max_sandbox_cpu_s.*must be above 0/],
    ['max_sandbox_cpu_s = -3', /budget\.max_sandbox_cpu_s.*must be above 0/],
    ['max_sandbox_cpu_s = "lots"', /budget\.max_sandbox_cpu_s.*must be a number/],
    ['max_dollars = 5', /budget.*max_dollars/],
  ])('%s is refused, naming the key', (line, message) => {
    expect(() => parseRunConfig(toml(line), 'x.toml')).toThrow(ConfigError);
    expect(() => parseRunConfig(toml(line), 'x.toml')).toThrow(message);
  });

  test('a sandbox lifetime shorter than a test run is refused, with the fix', () => {
    const text = '[[env]]\nid = "swe-grep"\n[sandbox]\nexec_timeout_s = 20\nmax_lifetime_s = 60\n';
    expect(() => parseRunConfig(text, 'x.toml')).toThrow(/sandbox\.max_lifetime_s.*must exceed 3 x sandbox\.exec_timeout_s/);
    expect(parseRunConfig(text.replace('60', '61'), 'x.toml').sandbox.max_lifetime_s).toBe(61);
  });

  test('the workflow\'s validator refuses what [budget] would', () => {
    expect(() => validateSettings({ budget: { sandbox_cpu_s: 0 } })).toThrow(/budget sandbox_cpu_s must be a number above 0 \(got 0\)/);
    expect(() => validateSettings({ budget: { nope: 1 } as never })).toThrow(/unknown figure nope/);
    expect(() => validateSettings({ budget: {} })).toThrow(/names no figure/);
    expect(() => validateSettings({ budget: { sandbox_cpu_s: 5 } })).not.toThrow();
  });

  test('--budget figure=value, repeatable; max_ prefix accepted', () => {
    expect(parseBudget('max_sandbox_cpu_s=10', parseBudget('tokens_generated=5'))).toEqual({ tokens_generated: 5, sandbox_cpu_s: 10 });
    expect(() => parseBudget('sandbox_cpu_s')).toThrow(/<figure>=<value>/);
    expect(() => parseBudget('dollars=5')).toThrow(/unknown figure dollars/);
    expect(() => parseBudget('sandbox_cpu_s=-1')).toThrow(/above 0/);
  });
});

describe('a step\'s cost', () => {
  test('sandboxes and tokens sum over every rollout (dropped ones too); trainer seconds from its metrics', () => {
    const boxes = [{ containers: 1, container_s: 2.5, cpu_s: 0.7 }, { containers: 2, container_s: 4.25, cpu_s: 1.1 }];
    const rollouts = [summary(0, boxes[0]), summary(1, boxes[1]), summary(2)];
    const stats = { ...rolloutStats(rollouts, 0), rollouts: rollouts.length };
    expect(stats.sandbox).toEqual({ containers: 3, container_s: 6.75, cpu_s: 1.8 });
    const trained = { metrics: { loss: 1, applied: true, cpu_s: 12.5, gpu_s: 3 }, restarts: 0 } as never;
    const built = { batch: {}, manifest: {}, summary: { trainable_tokens: 321 } } as never;
    const cost = stepCost({ stats, trained, built, temporalEvents: 42, temporalChildEvents: 77 });
    expect(cost).toEqual({
      sandbox_containers: 3, sandbox_container_s: 6.75, sandbox_cpu_s: 1.8, trainer_cpu_s: 12.5, trainer_gpu_s: 3,
      tokens_generated: 10 + 11 + 12, tokens_trained: 321, temporal_events: 42, temporal_child_events: 77,
    });
    // A step the trainer skipped trained nothing and spent no trainer time.
    expect(stepCost({ stats, built, temporalEvents: 1 })).toMatchObject({ tokens_trained: 0, trainer_cpu_s: 0 });
    // Summaries from before the ledger: no sandbox figures.
    expect(rolloutStats([summary(1)], 0).sandbox).toBeUndefined();
  });

  test('records carry cost and run_cost; older records without them still read', () => {
    const base = { format: 'ratchet.step/v1', run_id: 'r', step: 0, time: '2026-01-01T00:00:00Z', policy_version: 0, mean_reward: 0 };
    expect(StepRecord.parse(base).cost).toBeUndefined();
    const parsed = StepRecord.parse({ ...base, cost: { sandbox_cpu_s: 2 } });
    expect(parsed.cost).toEqual(CostFigures.parse({ sandbox_cpu_s: 2 }));
    expect(parsed.cost!.tokens_generated).toBe(0);
  });

  test('ratchet status shows the figures', () => {
    expect(costLine({ sandbox_containers: 4, sandbox_container_s: 12.4, sandbox_cpu_s: 3.6, tokens_generated: 99 }))
      .toMatch(/sandboxes 4 \(12 container-s, 4 CPU-s\).*99 generated/);
  });
});

describe('meterSandboxes', () => {
  test('counts every container acquired and sums the released ones\' usage once each', async () => {
    const usages = [{ container_s: 2.5, cpu_s: 0.25 }, undefined, { container_s: 1, cpu_s: 0.5 }];
    let n = 0;
    const inner = {
      async acquire(): Promise<Sandbox> {
        const u = usages[n++];
        let released = false;
        return {
          exec: async () => ({ exitCode: 0, stdout: '', stderr: '', timedOut: false, truncated: false, durationMs: 0 }),
          writeFile: async () => {}, readFile: async () => '', diff: async () => '',
          release: async () => { released = true; },
          // Like DockerSandbox: figures only after release; undefined when Docker had lost the container.
          usage: () => (released ? u : undefined),
        };
      },
    };
    const meter = meterSandboxes(inner);
    const opts = { labels: { run: 'r', step: 0, rollout: 'a' }, limits: {} as never };
    const a = await meter.acquire(opts);
    const b = await meter.acquire(opts);
    const c = await meter.acquire(opts);
    expect(meter.cost()).toEqual({ containers: 3, container_s: 0, cpu_s: 0 });
    await a.release();
    await a.release();
    await b.release();
    await c.release();
    expect(meter.cost()).toEqual({ containers: 3, container_s: 3.5, cpu_s: 0.75 });
  });
});
