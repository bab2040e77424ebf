/**
 * A rollout's turn journal: each turn the episode completes (the policy's
 * completion, token ids and logprobs included, and the tool outputs it got) is
 * written at once to the artifact store as one small part, before the next turn
 * is sampled. A retry of the same rollout (keyed by run, step, group and index,
 * never by attempt) reads the journal back and replays it instead of asking the
 * policy again (src/rollouts/episode.ts, src/agent/loop.ts).
 *
 * Parts form chains: each names the attempt that wrote it and the attempt whose
 * part at the turn before it follows. A stale attempt still writing after its
 * retry began only adds its own chain; the reader takes the longest chain that
 * no attempt has marked as diverged, so every turn it returns was sampled on
 * exactly the prompt the turns before it make.
 */
import { randomBytes } from 'node:crypto';
import type { ReplayTurn } from '../agent/loop';
import { runKeys } from '../artifacts/keys';
import type { ArtifactStore } from '../artifacts/store';
import { JournalDiverged, JournalTurn } from '../contracts/journal';
import type { Logger } from '../shared/logger';

/** Which rollout a journal belongs to: the identity every attempt of it shares. */
export interface RolloutIdentity {
  runId: string;
  step: number;
  groupId: string;
  rolloutIndex: number;
}

/** A new random id for one attempt of an episode. */
export function newAttemptId(): string {
  return randomBytes(4).toString('hex');
}

/** The longest valid chain of parts, turn 0 first; empty when there is none. */
export async function readJournal(store: ArtifactStore, id: RolloutIdentity, log?: Logger): Promise<JournalTurn[]> {
  const dir = runKeys.rolloutJournal(id.runId, id.step, id.groupId, id.rolloutIndex);
  const keys = await store.list(`${dir}/`);
  const parts: JournalTurn[] = [];
  const diverged = new Set<string>();
  for (const key of keys) {
    const name = key.slice(key.lastIndexOf('/') + 1);
    const isTurn = name.startsWith('turn-');
    if (!isTurn && !name.startsWith('diverged-')) continue;
    const bytes = await store.read(key);
    if (!bytes) continue; // listed, then gone (a cleanup): as if never written
    let value: unknown;
    try {
      value = JSON.parse(bytes.toString('utf8'));
    } catch {
      log?.warn({ key }, 'turn journal: a part is not JSON; left out');
      continue;
    }
    const parsed = isTurn ? JournalTurn.safeParse(value) : JournalDiverged.safeParse(value);
    if (!parsed.success) {
      log?.warn({ key, err: parsed.error.message }, 'turn journal: a part does not match its schema; left out');
      continue;
    }
    if (isTurn) parts.push(parsed.data as JournalTurn);
    else diverged.add(partId((parsed.data as JournalDiverged).turn, (parsed.data as JournalDiverged).part_attempt));
  }
  return longestChain(parts, diverged);
}

const partId = (turn: number, attempt: string): string => `${turn}:${attempt}`;

/** The longest chain from turn 0 through parts not marked diverged; of equal lengths, the one whose last part is newest. */
export function longestChain(parts: JournalTurn[], diverged: ReadonlySet<string> = new Set()): JournalTurn[] {
  const byTurn = new Map<number, JournalTurn[]>();
  for (const p of parts) {
    if (diverged.has(partId(p.turn, p.attempt))) continue;
    const list = byTurn.get(p.turn) ?? [];
    list.push(p);
    byTurn.set(p.turn, list);
  }
  let best: JournalTurn[] = [];
  // Depth-first over the chains; a chain is at most max_turns long, and attempts per rollout are few.
  const walk = (chain: JournalTurn[]): void => {
    const tip = chain[chain.length - 1];
    const next = (byTurn.get(chain.length) ?? []).filter((p) => (tip ? p.prev_attempt === tip.attempt : p.prev_attempt === null));
    if (next.length === 0) {
      if (chain.length > best.length || (chain.length === best.length && chain.length > 0 && tip!.at > best[best.length - 1]!.at)) best = [...chain];
      return;
    }
    for (const p of next) walk([...chain, p]);
  };
  walk([]);
  return best;
}

/** A journaled turn as the agent loop replays it. */
export function replayTurnOf(p: JournalTurn): ReplayTurn {
  return {
    completion: p.completion,
    toolOutputs: p.tool_outputs,
    policyVersion: p.policy_version,
    modelMs: p.model_ms,
    toolsMs: p.tools_ms,
  };
}

/**
 * Writes one attempt's turns. A write that fails is logged and ends the journal for this attempt
 * (the episode goes on: the journal only saves a retry work), since a later part could not chain to it.
 */
export class TurnJournal {
  /** The attempt whose part the next turn follows; null: the next turn starts a chain (turn 0). */
  private tip: string | null = null;
  private broken = false;
  /** Turns written by this attempt, and their bytes: the write cost the bench reports. */
  written = 0;
  bytes = 0;

  constructor(
    private readonly store: ArtifactStore,
    private readonly id: RolloutIdentity,
    readonly attempt: string,
    private readonly log?: Logger,
  ) {}

  /** The next turn continues `chain` (the turns replayed from it); an empty chain starts over. */
  continueFrom(chain: JournalTurn[]): void {
    this.tip = chain.length > 0 ? chain[chain.length - 1]!.attempt : null;
  }

  async append(turn: number, t: ReplayTurn): Promise<void> {
    if (this.broken) return;
    const part: JournalTurn = {
      format: 'ratchet.journal-turn/v1',
      turn,
      attempt: this.attempt,
      prev_attempt: this.tip,
      policy_version: t.policyVersion,
      completion: {
        content: t.completion.content,
        tool_calls: t.completion.tool_calls,
        finish_reason: t.completion.finish_reason,
        prompt_token_ids: t.completion.prompt_token_ids,
        completion_token_ids: t.completion.completion_token_ids,
        completion_logprobs: t.completion.completion_logprobs,
        ...(t.completion.completion_logprob_tokens !== undefined ? { completion_logprob_tokens: t.completion.completion_logprob_tokens } : {}),
        prompt_tokens: t.completion.prompt_tokens,
        completion_tokens: t.completion.completion_tokens,
      },
      tool_outputs: t.toolOutputs,
      model_ms: t.modelMs,
      tools_ms: t.toolsMs,
      at: Date.now(),
    };
    const key = runKeys.rolloutJournalTurn(this.id.runId, this.id.step, this.id.groupId, this.id.rolloutIndex, turn, this.attempt);
    try {
      const ref = await this.store.put(key, JSON.stringify(part));
      this.tip = this.attempt;
      this.written += 1;
      this.bytes += ref.bytes;
    } catch (err) {
      this.broken = true;
      this.log?.warn({ key, err: (err as Error).message }, 'turn journal: writing a turn failed; this attempt journals no further turns');
    }
  }

  /** Marks `part`'s replay as diverged (best effort), so no later attempt replays it again. */
  async markDiverged(part: JournalTurn, expected: string, actual: string): Promise<void> {
    const record: JournalDiverged = {
      format: 'ratchet.journal-diverged/v1', attempt: this.attempt, turn: part.turn, part_attempt: part.attempt,
      expected: expected.slice(0, 400), actual: actual.slice(0, 400),
    };
    const key = runKeys.rolloutJournalDiverged(this.id.runId, this.id.step, this.id.groupId, this.id.rolloutIndex, this.attempt, part.turn);
    await this.store.put(key, JSON.stringify(record)).catch((err: Error) => this.log?.warn({ key, err: err.message }, 'turn journal: marking a diverged turn failed'));
  }
}
