/**
 * Whether an inference server returns the logprobs of the distribution it sampled from.
 *
 * vLLM's default, `--logprobs-mode raw_logprobs`, returns the model's logprobs before
 * temperature and top-k/top-p; the trainer's importance ratio needs the processed ones
 * (`--logprobs-mode processed_logprobs`, infra/inference.sh) whenever the run's sampling
 * changes the distribution: temperature != 1, top_p < 1 or top_k > 0. With T = 1 and
 * no truncation the two agree, and any server will do.
 *
 * The probe samples a few tokens with top_k = 1 at temperature 1: after top-k the
 * sampled token holds all the probability, so a processed logprob is exactly 0, while
 * a raw one is the model's own log-probability of its top token, below 0 unless the
 * model is certain. `ratchet check` and the start of a run (the openRun activity) use it.
 */

export interface SamplingNeeds {
  temperature: number;
  top_p: number;
  top_k?: number;
}

/** Why the run needs processed logprobs (the settings that make raw ones wrong), or undefined when raw ones are the same. */
export function processedLogprobsReason(s: SamplingNeeds): string | undefined {
  const why: string[] = [];
  if (s.temperature !== 1) why.push(`sampling.temperature = ${s.temperature}`);
  if (s.top_p < 1) why.push(`sampling.top_p = ${s.top_p}`);
  if ((s.top_k ?? 0) > 0) why.push(`sampling.top_k = ${s.top_k}`);
  return why.length ? why.join(', ') : undefined;
}

export type LogprobsProbe =
  | { kind: 'processed' }
  | { kind: 'raw'; logprobs: number[] }
  | { kind: 'none'; detail: string }
  | { kind: 'inconclusive'; detail: string }
  | { kind: 'unreachable'; detail: string };

/** |logprob| below this is a token that held all the probability. */
const ZERO = 1e-4;
/** A raw top-token logprob below this could not come from a top-1 distribution. */
const RAW = -1e-3;

export type FetchLike = (url: string, init: { method: string; headers: Record<string, string>; body: string; signal?: AbortSignal }) =>
  Promise<{ status: number; json(): Promise<unknown> }>;

/** Asks `baseUrl` (an OpenAI-compatible /v1 root) for a few top-1 tokens with logprobs and reads which kind they are. */
export async function probeLogprobsMode(baseUrl: string, model: string, opts: { fetch?: FetchLike; timeoutMs?: number } = {}): Promise<LogprobsProbe> {
  const doFetch: FetchLike = opts.fetch ?? ((url, init) => fetch(url, init));
  const url = `${baseUrl.replace(/\/$/, '')}/chat/completions`;
  let status: number;
  let body: unknown;
  try {
    const res = await doFetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${process.env.RATCHET_INFERENCE_API_KEY ?? 'EMPTY'}` },
      body: JSON.stringify({
        model,
        messages: [{ role: 'user', content: 'Write twenty random digits, separated by spaces.' }],
        max_tokens: 8,
        temperature: 1,
        top_p: 1,
        top_k: 1,
        min_p: 0,
        repetition_penalty: 1,
        logprobs: true,
      }),
      signal: AbortSignal.timeout(opts.timeoutMs ?? 30_000),
    });
    status = res.status;
    body = await res.json();
  } catch (err) {
    return { kind: 'unreachable', detail: (err as Error).message };
  }
  if (status !== 200) return { kind: 'inconclusive', detail: `chat completion answered ${status}: ${JSON.stringify(body).slice(0, 200)}` };
  const content = (body as { choices?: { logprobs?: { content?: { logprob?: unknown }[] | null } | null }[] }).choices?.[0]?.logprobs?.content;
  if (!Array.isArray(content) || content.length === 0) return { kind: 'none', detail: 'the response has no logprobs for its tokens' };
  const lps = content.map((c) => c.logprob);
  if (!lps.every((x): x is number => typeof x === 'number')) return { kind: 'none', detail: 'the response\'s token logprobs are not numbers' };
  if (lps.every((x) => Math.abs(x) < ZERO)) return { kind: 'processed' };
  if (lps.some((x) => x < RAW)) return { kind: 'raw', logprobs: lps };
  return { kind: 'inconclusive', detail: `top-1 token logprobs ${JSON.stringify(lps)} are neither all 0 nor clearly below it` };
}

/**
 * What a probe means for a run whose sampling needs processed logprobs (`reason`): a message
 * when the server cannot serve the run, else undefined. An unreachable or inconclusive probe is
 * not a failure here (the caller reports reachability on its own).
 */
export function logprobsModeProblem(probe: LogprobsProbe, where: string, reason: string): string | undefined {
  const fix = 'Fix: start vLLM with --logprobs-mode processed_logprobs (infra/inference.sh does), ' +
    'or sample at sampling.temperature = 1 with top_p = 1 and top_k = 0, where raw and processed logprobs agree';
  if (probe.kind === 'raw') {
    return `${where} returns raw logprobs (the model's, before temperature and top-k/top-p: a top-1 sample's logprobs were ` +
      `${probe.logprobs.slice(0, 4).map((x) => x.toFixed(3)).join(', ')} instead of 0), but the run samples with ${reason}, so the trainer's ` +
      `importance ratios would compare against a distribution the tokens were not drawn from. ${fix}`;
  }
  if (probe.kind === 'none') {
    return `${where} returns no logprobs for sampled tokens (${probe.detail}); the run samples with ${reason} and the trainer needs the ` +
      `sampled distribution's logprobs. ${fix}`;
  }
  return undefined;
}

/**
 * `ratchet check`'s lines: for a run whose sampling needs processed logprobs, one per inference
 * server that answers (an unreachable one is already reported by the reachability check).
 */
export async function checkLogprobsMode(
  c: { sampling: SamplingNeeds; inference: { base_urls: readonly string[]; served_model: string } },
  opts: { fetch?: FetchLike; timeoutMs?: number } = {},
): Promise<{ level: 'ok' | 'warn' | 'fail'; message: string }[]> {
  const reason = processedLogprobsReason(c.sampling);
  if (!reason) return [];
  const lines = await Promise.all(c.inference.base_urls.map(async (url, i) => {
    const where = `inference.base_urls[${i}] ${url}`;
    const probe = await probeLogprobsMode(url, c.inference.served_model, opts);
    const problem = logprobsModeProblem(probe, where, reason);
    if (problem) return { level: 'fail' as const, message: problem };
    if (probe.kind === 'processed') return { level: 'ok' as const, message: `inference ${url} returns processed logprobs (the sampled distribution's, as ${reason} needs)` };
    if (probe.kind === 'inconclusive') {
      return { level: 'warn' as const, message: `${where}: could not tell whether it returns processed logprobs (${probe.detail}); the run samples with ${reason}, which needs them` };
    }
    return undefined;
  }));
  return lines.filter((l): l is NonNullable<typeof l> => l !== undefined);
}
