import type { RolloutSummary } from '../../../src/contracts/trajectory';
import { rolloutStats } from '../../../src/rollouts/stats';

const summary = (over: Partial<RolloutSummary>): RolloutSummary => ({
  task_id: 't', group_id: 'g', rollout_index: 0, trajectory: { uri: 'file:///x', sha256: '0'.repeat(64), bytes: 1 },
  reward: 0, components: {}, stop_reason: 'completed', policy_version: 2, completion_tokens: 10, tool_calls: 1,
  model_ms: 1, tools_ms: 1, sandbox_ms: 1, ...over,
});

describe('rolloutStats', () => {
  it('aggregates rewards, staleness, tools and shell programs over a step', () => {
    const s = rolloutStats([
      summary({ reward: 1, components: { a: 1 }, policy_version: 2, prompt_tokens: 50, tools_used: { bash: 2, result: 1 }, commands: { rg: 2 } }),
      summary({ reward: 0, components: { a: 0 }, policy_version: 1, prompt_tokens: 30, tools_used: { bash: 1 }, commands: { rg: 1, cat: 1 } }),
      summary({ reward: 0.5, components: { a: 0.5 }, policy_version: 2 }), // an older summary without usage counts
    ], 2);
    expect(s.meanReward).toBeCloseTo(0.5);
    expect(s.components).toEqual({ a: 0.5 });
    expect(s.stalenessHistogram).toEqual({ 0: 2, 1: 1 });
    expect(s.meanStaleness).toBeCloseTo(1 / 3, 5);
    expect(s.toolsUsed).toEqual({ bash: 3, result: 1 });
    expect(s.shellCommands).toEqual({ rg: 3, cat: 1 });
    expect(s.promptTokens).toBe(80);
    expect(s.completionTokens).toBe(30);
  });

  it('leaves infrastructure failures out of the reward, and counts them', () => {
    const s = rolloutStats([
      summary({ reward: 1, components: { a: 1 } }),
      summary({ reward: 0, components: { a: 0 } }),
      summary({ reward: -5, components: { a: -5 }, stop_reason: 'infra_error' }),
    ], 2);
    expect(s.meanReward).toBeCloseTo(0.5);
    expect(s.components).toEqual({ a: 0.5 });
    expect(s.stopReasons).toEqual({ completed: 2, infra_error: 1 });
  });

  it('a rollout whose task could not be set up is counted but not scored', () => {
    const s = rolloutStats([
      summary({ reward: 1, components: { a: 1 } }),
      summary({ reward: 0, components: { a: 0 } }),
      summary({ reward: 0, components: { a: 0 }, stop_reason: 'setup_error' }),
    ], 2);
    expect(s.meanReward).toBeCloseTo(0.5);
    expect(s.components).toEqual({ a: 0.5 });
    expect(s.stopReasons).toEqual({ completed: 2, setup_error: 1 });
  });
});
