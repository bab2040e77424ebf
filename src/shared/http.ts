/**
 * HTTP from Ratchet's processes to the stack's servers (vLLM, the health routes) with Node's fetch: its
 * failures said plainly, and a request sent again where a pooled socket was closed under it.
 */

/** fetch's own error says only "fetch failed"; its cause says why (ECONNREFUSED, a socket the server closed). */
export function fetchErrorText(err: unknown): string {
  const e = err as Error & { cause?: { code?: unknown; message?: unknown } };
  const why = [e.cause?.code, e.cause?.message].filter((x) => typeof x === 'string' && x !== '').join(' ');
  return why && !e.message.includes(why) ? `${e.message} (${why})` : e.message;
}

/**
 * A request that went out on a pooled keep-alive socket the server closed as it was sent: uvicorn (vLLM)
 * closes an idle socket after 5 s, and a process that spoke to it before (the CI run's earlier suites, in
 * its jest process) may send on one it has just closed ("other side closed"). No answer came, so nothing
 * was done; fetch has dropped that socket and the request can go again.
 */
export function isStaleSocket(err: unknown): boolean {
  const code = (err as { cause?: { code?: unknown } } | undefined)?.cause?.code;
  return code === 'UND_ERR_SOCKET' || code === 'ECONNRESET';
}

/** GET or POST `url`, its JSON (or text) body; sent again (up to 3 times in all) on a stale pooled socket. */
export async function fetchJson(url: string, init?: RequestInit, timeoutMs = 60_000): Promise<{ status: number; body: unknown }> {
  let res: Response;
  for (let attempt = 1; ; attempt++) {
    try {
      res = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
      break;
    } catch (err) {
      if (attempt < 3 && isStaleSocket(err)) continue;
      throw new Error(fetchErrorText(err));
    }
  }
  const text = await res.text();
  let body: unknown = text;
  try { body = JSON.parse(text); } catch { /* plain text body */ }
  return { status: res.status, body };
}
