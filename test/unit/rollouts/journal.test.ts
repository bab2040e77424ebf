import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createRolloutActivities } from '../../../src/activities/rollout';
import type { Completion, CompletionRequest, ModelClient } from '../../../src/agent/model';
import { runKeys } from '../../../src/artifacts/keys';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import type { RolloutInput } from '../../../src/contracts/rollout';
import { Trajectory, type RolloutSummary } from '../../../src/contracts/trajectory';
import { longestChain, readJournal, TurnJournal } from '../../../src/rollouts/journal';
import { CALC_FILES, call, FakeSandboxManager } from '../../helpers/rolloutFakes';

jest.setTimeout(30_000);

const task = {
  instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1', patch: '',
  FAIL_TO_PASS: [], PASS_TO_PASS: [], gold_files: ['pkg/calc.py'], source: { type: 'snapshot' as const, repo_path: 'repos/calc.git' },
};
const ID = { runId: 'run1', step: 2, groupId: 'g0', rolloutIndex: 1 };

function input(over: Partial<RolloutInput> = {}): RolloutInput {
  return {
    ...ID, envId: 'swe-grep', task, taskSetDir: '/tasks',
    policyVersion: 1, modelName: 'policy-v1', sampling: { temperature: 1, top_p: 1, max_tokens: 64 },
    envArgs: { max_tokens: 5000, max_tool_calls: 30, max_turns: 20 }, rubric: {},
    sandbox: { memory_mb: 512, cpus: 1, pids_limit: 128, disk_mb: 256, exec_timeout_s: 30, output_limit_bytes: 16384, warm_pool_size: 0 },
    inferenceBaseUrl: 'http://127.0.0.1:8000/v1', seed: 7, ...over,
  };
}

/** Turn k of the script: a bash command, then the answer. Token ids and logprobs differ per turn and per attempt. */
function completionFor(turn: number, commands: string[], salt: number): Completion {
  const command = commands[turn];
  const ids = [1000 * salt + 10 * turn, 1000 * salt + 10 * turn + 1, 1000 * salt + 10 * turn + 2];
  return {
    content: `thinking ${turn} (${salt})`,
    tool_calls: [command !== undefined
      ? call('bash', { command }, `c${turn}`)
      : call('result', { files: ['pkg/calc.py'], functions: ['add'] }, `c${turn}`)],
    finish_reason: 'tool_calls',
    prompt_token_ids: [1, 2, 3, turn],
    completion_token_ids: ids,
    completion_logprobs: ids.map((i) => -1 / (i + 1)),
    prompt_tokens: 4,
    completion_tokens: 3,
  };
}

/** The policy: counts every request; `dieAt` throws at that request, as a worker dying mid-episode ends an attempt. */
class CountingModel implements ModelClient {
  requests: CompletionRequest[] = [];
  constructor(private readonly commands: string[], private readonly salt: number, private readonly dieAt?: number) {}
  async complete(req: CompletionRequest): Promise<Completion> {
    const turn = req.messages.filter((m) => m.role === 'assistant').length;
    if (this.dieAt !== undefined && this.requests.length === this.dieAt) throw new Error('the rollout worker died (simulated)');
    this.requests.push({ ...req, messages: [...req.messages] }); // the loop's array grows after the call
    return completionFor(turn, this.commands, this.salt);
  }
}

const commands = ['ls pkg', 'grep -n "def add" pkg/calc.py', 'cat pkg/calc.py', 'wc -l tests/test_calc.py', 'git status --short'];

function setup() {
  const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-resume-')));
  const sandboxes = new FakeSandboxManager(CALC_FILES);
  return { store, sandboxes };
}

describe('turn journal', () => {
  const turn = (k: number) => ({ completion: completionFor(k, commands, 1), toolOutputs: [{ role: 'tool' as const, content: `out ${k}`, tool_call_id: `c${k}`, name: 'bash' }], policyVersion: 3, modelMs: 12, toolsMs: 5 });

  test('round-trips: what an attempt appends, a retry reads back, turn for turn and token for token', async () => {
    const { store } = setup();
    const a = new TurnJournal(store, ID, 'aaaa0001');
    for (let k = 0; k < 3; k++) await a.append(k, turn(k));
    expect(a.written).toBe(3);
    const chain = await readJournal(store, ID);
    expect(chain.map((p) => [p.turn, p.attempt, p.prev_attempt])).toEqual([[0, 'aaaa0001', null], [1, 'aaaa0001', 'aaaa0001'], [2, 'aaaa0001', 'aaaa0001']]);
    expect(chain[1]!.completion).toEqual(turn(1).completion);
    expect(chain[1]!.tool_outputs).toEqual(turn(1).toolOutputs);
    expect(chain[1]).toMatchObject({ policy_version: 3, model_ms: 12, tools_ms: 5 });
    expect(await store.list(`${runKeys.rolloutJournal('run1', 2, 'g0', 1)}/`)).toEqual([0, 1, 2].map((k) => runKeys.rolloutJournalTurn('run1', 2, 'g0', 1, k, 'aaaa0001')));
  });

  test('a retry continues the chain it resumed; a stale attempt\'s own shorter chain never mixes in', async () => {
    const { store } = setup();
    const a = new TurnJournal(store, ID, 'aaaa0001');
    for (let k = 0; k < 3; k++) await a.append(k, turn(k));
    const b = new TurnJournal(store, ID, 'bbbb0002');
    b.continueFrom(await readJournal(store, ID));
    await b.append(3, turn(3));
    // A stale attempt that started over (no journal seen) writes its own turns 0 and 1 meanwhile.
    const stale = new TurnJournal(store, ID, 'cccc0003');
    await stale.append(0, turn(0));
    await stale.append(1, turn(1));
    const chain = await readJournal(store, ID);
    expect(chain.map((p) => `${p.turn}:${p.attempt}`)).toEqual(['0:aaaa0001', '1:aaaa0001', '2:aaaa0001', '3:bbbb0002']);
  });

  test('a part marked diverged is never replayed again; a part that is not JSON or not a part is left out', async () => {
    const { store } = setup();
    const a = new TurnJournal(store, ID, 'aaaa0001');
    for (let k = 0; k < 4; k++) await a.append(k, turn(k));
    const b = new TurnJournal(store, ID, 'bbbb0002');
    await b.markDiverged((await readJournal(store, ID))[2]!, 'x', 'y');
    expect((await readJournal(store, ID)).map((p) => p.turn)).toEqual([0, 1]);
    await store.put(runKeys.rolloutJournalTurn('run1', 2, 'g0', 1, 2, 'dddd0004'), '{not json');
    await store.put(runKeys.rolloutJournalTurn('run1', 2, 'g0', 1, 2, 'eeee0005'), JSON.stringify({ format: 'other' }));
    expect((await readJournal(store, ID)).map((p) => p.turn)).toEqual([0, 1]);
  });

  test('of two chains of equal length, the newest wins; no parts, no chain', () => {
    const part = (attempt: string, t: number, prev: string | null, at: number) => ({
      format: 'ratchet.journal-turn/v1' as const, turn: t, attempt, prev_attempt: prev, policy_version: 0,
      completion: completionFor(t, commands, 1), tool_outputs: [], model_ms: 0, tools_ms: 0, at,
    });
    expect(longestChain([])).toEqual([]);
    const chain = longestChain([part('a', 0, null, 1), part('a', 1, 'a', 2), part('b', 0, null, 3), part('b', 1, 'b', 4)]);
    expect(chain.map((p) => p.attempt)).toEqual(['b', 'b']);
  });
});

describe('turn resume: a retried rollout replays its journaled turns instead of sampling them again', () => {
  test('killed at turn 4: the retry asks the policy only for the turns after it, and keeps turns 1-3 token for token', async () => {
    const { store, sandboxes } = setup();
    const first = new CountingModel(commands, 1, 3); // turns 1-3 sampled, dies asking for turn 4
    const acts1 = createRolloutActivities({ store, sandboxes, openaiFactory: () => first });
    await expect(new MockActivityEnvironment({ attempt: 1 }).run(acts1.rollout, input())).rejects.toThrow();
    expect(first.requests).toHaveLength(3);
    expect(sandboxes.sandboxes.every((s) => s.released)).toBe(true);

    const second = new CountingModel(commands, 2);
    const acts2 = createRolloutActivities({ store, sandboxes, openaiFactory: () => second });
    const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 2 }).run(acts2.rollout, input());
    const t = Trajectory.parse(await store.getJson(summary.trajectory));
    // The policy was asked for turns 4, 5 and the answer (turn 6) only, each time on the whole conversation so far.
    expect(second.requests.map((r) => r.messages.filter((m) => m.role === 'assistant').length)).toEqual([3, 4, 5]);
    expect(second.requests[0]!.messages.slice(2)).toEqual(t.messages.slice(2, 2 + 6));
    expect(t.turns).toHaveLength(6);
    for (let k = 0; k < 3; k++) {
      const was = completionFor(k, commands, 1);
      expect(t.turns[k]).toMatchObject({ completion_token_ids: was.completion_token_ids, completion_logprobs: was.completion_logprobs, prompt_token_ids: was.prompt_token_ids });
    }
    expect(t.turns[3]!.completion_token_ids).toEqual(completionFor(3, commands, 2).completion_token_ids);
    expect(t.resume).toEqual({ outcome: 'resumed', turns_journaled: 3, turns_replayed: 3 });
    expect(t.stats).toMatchObject({ tool_calls: 6, completion_tokens: 18 });
    expect(t.messages.filter((m) => m.role === 'tool')[2]!.content).toMatch(/def add/); // replayed in the fresh sandbox
    expect(summary).toMatchObject({ stop_reason: 'completed' });
    expect(summary.reward).toBeGreaterThan(0);
    // The retry's new turns went to the journal too, continuing the chain.
    expect((await readJournal(store, ID)).map((p) => p.turn)).toEqual([0, 1, 2, 3, 4, 5]);
  });

  test('a first attempt has no resume record, and journals every turn', async () => {
    const { store, sandboxes } = setup();
    const model = new CountingModel(commands.slice(0, 2), 1);
    const acts = createRolloutActivities({ store, sandboxes, openaiFactory: () => model });
    const summary: RolloutSummary = await new MockActivityEnvironment().run(acts.rollout, input());
    const t = Trajectory.parse(await store.getJson(summary.trajectory));
    expect(t.resume).toBeUndefined();
    expect((await readJournal(store, ID)).map((p) => p.completion.completion_token_ids)).toEqual(t.turns.map((x) => x.completion_token_ids));
  });

  test('a replayed tool output that differs starts the episode over in a fresh sandbox, and the record says so', async () => {
    const { store, sandboxes } = setup();
    // Turn 2's output differs in every sandbox: the journal's turns after it cannot be replayed.
    const racy = ['ls pkg', 'echo $RANDOM$RANDOM$RANDOM', 'cat pkg/calc.py', 'wc -l tests/test_calc.py'];
    const first = new CountingModel(racy, 1, 4);
    await expect(new MockActivityEnvironment({ attempt: 1 }).run(createRolloutActivities({ store, sandboxes, openaiFactory: () => first }).rollout, input())).rejects.toThrow();
    const acquiredBefore = sandboxes.acquired.length;

    const second = new CountingModel(racy, 2);
    const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 2 })
      .run(createRolloutActivities({ store, sandboxes, openaiFactory: () => second }).rollout, input());
    const t = Trajectory.parse(await store.getJson(summary.trajectory));
    expect(t.resume).toEqual({ outcome: 'restarted-diverged', turns_journaled: 4, turns_replayed: 0, diverged_at_turn: 1 });
    // Started over: the policy was asked for every turn again, in a second fresh sandbox (the replay's was released).
    expect(second.requests).toHaveLength(5);
    expect(t.turns.map((x) => x.completion_token_ids![0])).toEqual([0, 1, 2, 3, 4].map((k) => 2000 + 10 * k));
    expect(sandboxes.acquired.length - acquiredBefore).toBe(2);
    expect(sandboxes.sandboxes.every((s) => s.released)).toBe(true);
    const marks = (await store.list(`${runKeys.rolloutJournal('run1', 2, 'g0', 1)}/`)).filter((k) => k.includes('/diverged-'));
    expect(marks).toHaveLength(1);
    // The next attempt resumes the new chain, never the diverged one.
    expect((await readJournal(store, ID)).map((p) => p.completion.completion_token_ids![0])).toEqual([0, 1, 2, 3, 4].map((k) => 2000 + 10 * k));
  });
});
