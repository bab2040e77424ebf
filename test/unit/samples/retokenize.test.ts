import { pairLogprobsByContent } from '../../../src/samples/retokenize';
import { BatchBuildError } from '../../../src/samples/errors';
import type { Turn } from '../../../src/contracts/trajectory';

/** A toy vocabulary: id -> text. */
const VOCAB: Record<number, string> = { 1: ' foo', 2: 'bar', 3: ' fo', 4: 'obar', 5: '!' };
const tok = { decode: (ids: number[]) => ids.map((i) => VOCAB[i]!).join('') };

function turn(tokens: string[] | null, logprobs: number[]): Turn {
  return {
    prompt_message_count: 2, prompt_token_ids: null, completion_token_ids: null, completion_logprobs: logprobs,
    completion_logprob_tokens: tokens, finish_reason: 'stop', policy_version: 0,
  } as unknown as Turn;
}

describe('allow_retokenize pairs logprobs with ids by content', () => {
  test('the same cut: each token gets its own logprob, in order', () => {
    expect(pairLogprobsByContent(turn([' foo', 'bar', '!'], [-1, -2, -3]), [1, 2, 5], tok, 'x')).toEqual([-1, -2, -3]);
  });

  test('same count, different cut: refused, never paired by position', () => {
    // Server: " fo" + "obar" + "!"; re-encoded: " foo" + "bar" + "!". Both 3 tokens: pairing by
    // count would give " foo" the logprob of " fo".
    const t = turn([' fo', 'obar', '!'], [-1, -2, -3]);
    expect(() => pairLogprobsByContent(t, [1, 2, 5], tok, 'x')).toThrow(BatchBuildError);
    expect(() => pairLogprobsByContent(t, [1, 2, 5], tok, 'x')).toThrow(/at character 0 the re-encoded token " foo" does not match one server token/);
  });

  test('other text altogether, or no token text from the server: refused with the reason', () => {
    expect(() => pairLogprobsByContent(turn([' foo', '!'], [-1, -2]), [1, 2, 5], tok, 'x')).toThrow(/the logprobs are of other text/);
    expect(() => pairLogprobsByContent(turn(null, [-1, -2, -3]), [1, 2, 5], tok, 'x')).toThrow(/returned no token text/);
  });
});
