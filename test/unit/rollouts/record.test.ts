/**
 * Issue 39, item 8: a rollout summary crosses Temporal in heartbeat details and failure details, up to
 * rollouts_per_chunk of them in one payload. Its `commands` map is keyed by whatever the agent ran,
 * so it is bounded where the summary is built, and the summary's size is checked against
 * SUMMARY_BYTES_MAX (what the fan-out checks count on).
 */
import { SUMMARY_BYTES_MAX } from '../../../src/config/fanout';
import { Trajectory } from '../../../src/contracts/trajectory';
import { COMMANDS_NAMED, OTHER_COMMANDS, boundedSummary, summaryOfStored } from '../../../src/rollouts/record';

/** An agent that ran 2,000 distinct programs with long names, and `rg` most of all. */
function floodingTrajectory(taskId = 't1'): Trajectory {
  const commands = ['rg', 'rg', 'rg', 'cat', 'cat', ...Array.from({ length: 2_000 }, (_, i) => `./script_${i}_${'x'.repeat(180)}`)];
  return Trajectory.parse({
    format: 'ratchet.trajectory/v1', run_id: 'r', step: 0, env_id: 'swe-grep', task_id: taskId, group_id: 's0-g0',
    rollout_index: 0, model: 'm', tools: [], messages: [{ role: 'user', content: 'go' }], turns: [], stop_reason: 'completed',
    final: {}, reward: { total: 0.5, components: { f1: 0.5 } },
    stats: { prompt_tokens: 1, completion_tokens: 1, tool_calls: commands.length, tool_errors: 0, commands, tools_used: { shell: commands.length } },
    timing: { model_ms: 1, tools_ms: 1, sandbox_ms: 1, total_ms: 3 },
  });
}
const ref = { uri: 'file:///x', sha256: 'a'.repeat(64), bytes: 1 };

describe('a rollout summary is bounded where it is built', () => {
  test('2,000 distinct commands: the summary stays under SUMMARY_BYTES_MAX and every command is still counted', () => {
    const s = summaryOfStored(floodingTrajectory(), ref, 0);
    expect(Buffer.byteLength(JSON.stringify(s))).toBeLessThanOrEqual(SUMMARY_BYTES_MAX);
    const commands = s.commands!;
    // The most used are named; the rest are counted together, so the total is the agent's own count (2,005).
    expect(commands.rg).toBe(3);
    expect(commands.cat).toBe(2);
    expect(Object.keys(commands).length).toBe(COMMANDS_NAMED + 1);
    expect(commands[OTHER_COMMANDS]).toBe(2_005 - Object.entries(commands).filter(([k]) => k !== OTHER_COMMANDS).reduce((a, [, n]) => a + n, 0));
    expect(Object.values(commands).reduce((a, n) => a + n, 0)).toBe(2_005);
  });

  test('a summary still too large after that names its largest field and the fix', () => {
    const s = summaryOfStored(floodingTrajectory(), ref, 0);
    expect(() => boundedSummary({ ...s, task_id: 'T'.repeat(SUMMARY_BYTES_MAX) })).toThrow(/largest field is task_id .*Fix:/);
  });
});
