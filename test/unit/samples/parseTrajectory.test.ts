import { parseTrajectory } from '../../../src/samples/parseTrajectory';
import { Trajectory } from '../../../src/contracts/trajectory';

const base = () => ({
  format: 'ratchet.trajectory/v1', run_id: 'r', step: 0, env_id: 'e', task_id: 't', group_id: 'g', rollout_index: 0, model: 'm', tools: [],
  messages: [{ role: 'user', content: 'x' }],
  turns: [{ prompt_message_count: 1, prompt_token_ids: [1, 2, 3], completion_token_ids: [4, 5], completion_logprobs: [-0.1, -0.2], finish_reason: 'stop', policy_version: 0, model_ms: 0, tools_ms: 0 }],
  stop_reason: 'completed', stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} },
  timing: { model_ms: 0, tools_ms: 0, sandbox_ms: 0, total_ms: 0 },
});

describe('fast trajectory validation', () => {
  test('gives what the zod schema gives, token arrays included', () => {
    const r = parseTrajectory(base());
    expect(r.ok).toBe(true);
    expect(r.ok && r.value).toEqual(Trajectory.parse(base()));
  });

  test.each([
    ['prompt_token_ids', [1, -2], 'turns.0.prompt_token_ids.1', /non-negative integer/],
    ['completion_token_ids', [4, 5.5], 'turns.0.completion_token_ids.1', /non-negative integer/],
    ['completion_logprobs', ['x', 1], 'turns.0.completion_logprobs.0', /finite number/],
  ])('a bad %s element is named by its path', (field, value, path, msg) => {
    const t = base();
    (t.turns[0] as Record<string, unknown>)[field] = value;
    const r = parseTrajectory(t);
    expect(r).toMatchObject({ ok: false, field: path });
    expect(!r.ok && r.message).toMatch(msg);
  });

  test('null ids pass (the builder reports them with the server fix); other fields go through the schema', () => {
    const t = base();
    t.turns[0]!.prompt_token_ids = null as unknown as number[];
    expect(parseTrajectory(t).ok).toBe(true);
    const u = base() as Record<string, unknown>;
    delete u.group_id;
    expect(parseTrajectory(u)).toMatchObject({ ok: false, field: 'group_id' });
  });
});
