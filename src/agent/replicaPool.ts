/**
 * Inference replicas as a pool, as one rollout sees them.
 *
 * StepRollouts names a preferred replica for each rollout (spread over inference.base_urls)
 * and every replica of the run. The rollout talks to one replica at a time. When that replica
 * is down (connection refused or reset, a timeout, a 5xx, or a 404 for the model: a restarted
 * vLLM lost its adapters), the episode goes on, at the same turn, on another replica that
 * serves the same policy version. Token-in token-out stays exact: a replica is used only when
 * its /v1/models lists the rollout's model (`<run>/policy-v<N>`), loaded from the same step's
 * adapter as the replica the rollout used before. A replica that came back after missing a
 * weight sync (a restarted vLLM serves no adapter) is passed over until a later sync loads the
 * version: it never samples for a version it does not hold. Each turn records the replica
 * that sampled it (Turn.replica). A ModelClient over one OpenAIModelClient a replica (./model.ts).
 */
import OpenAI from 'openai';
import { InferenceUnavailableError, type Completion, type CompletionRequest, type ModelClient } from './model';
import type { Logger } from '../shared/logger';
import { replicaName } from '../shared/replicas';
import { ServedWeightsMismatch } from './servedWeights';

/** A model answer, with the replica that sampled it. */
export type PooledCompletion = Completion & { replica: string };

/** Network errors (Node's and undici's codes) that say the server is not there. */
const NETWORK_CODES = /ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|EPIPE|UND_ERR_(CONNECT_TIMEOUT|SOCKET|HEADERS_TIMEOUT|BODY_TIMEOUT|CLOSED)/;

/**
 * The replica, not the request, failed: another replica may answer the same request.
 * A 4xx (a bad request, a prompt too long) would fail on every replica alike, except a 404 for
 * the model, which is a replica that no longer serves the version.
 */
export function isReplicaDown(err: unknown): boolean {
  // Silent (its health probe got no answer): another replica may answer.
  if (err instanceof InferenceUnavailableError) return true;
  // A full run's replica serving other weights (restarted: the base model), as a LoRA one's 404 below.
  if (err instanceof ServedWeightsMismatch) return true;
  if (err instanceof OpenAI.APIUserAbortError) return false;
  // Refused, reset, and timeouts (APIConnectionTimeoutError is one).
  if (err instanceof OpenAI.APIConnectionError) return true;
  if (err instanceof OpenAI.NotFoundError) return /model/i.test(err.message);
  if (err instanceof OpenAI.APIError) return typeof err.status === 'number' && err.status >= 500;
  const e = err as { code?: unknown; message?: unknown; cause?: { code?: unknown; message?: unknown } } | undefined;
  const text = `${String(e?.code ?? '')} ${String(e?.message ?? '')} ${String(e?.cause?.code ?? '')} ${String(e?.cause?.message ?? '')}`;
  return NETWORK_CODES.test(text) || /fetch failed/i.test(text);
}

/**
 * Replicas a rollout worker saw down, shared by its rollouts: one rollout's discovery spares the
 * others a try for `holdMs`; after that the replica is probed again (it may be back).
 */
export class ReplicaHealth {
  private readonly downUntil = new Map<string, number>();

  constructor(private readonly holdMs = 30_000, private readonly now: () => number = Date.now) {}

  markDown(url: string): void {
    this.downUntil.set(url, this.now() + this.holdMs);
  }

  markUp(url: string): void {
    this.downUntil.delete(url);
  }

  isDown(url: string): boolean {
    const until = this.downUntil.get(url);
    return until !== undefined && until > this.now();
  }
}

/** No replica serves the rollout's version now: the attempt fails and is retried (StepRollouts syncs and waits). */
export class NoReplicaServes extends Error {
  override readonly name = 'NoReplicaServes';
}

export interface ReplicaPoolOptions {
  /** Every replica of the run (inference.base_urls). */
  replicas: readonly string[];
  /** The one StepRollouts chose for this rollout: tried first. */
  preferred: string;
  clientFor: (baseUrl: string) => ModelClient;
  health?: ReplicaHealth;
  fetch?: typeof fetch;
  /** How long asking a replica what it serves may take. */
  probeTimeoutMs?: number;
  log?: Pick<Logger, 'warn' | 'info'>;
}

/** Which step's adapter a served model was loaded from: the `step-<n>-<batch hash>` directory in its path (local or a host's cache). */
export function adapterIdentity(root: string | undefined): string | undefined {
  return root?.split(/[\\/]+/).find((seg) => /^step-\d+-[0-9a-f]{8,}$/.test(seg));
}

type Probe = { kind: 'serves'; identity: string | undefined } | { kind: 'behind'; why: string } | { kind: 'down'; why: string };

/** One rollout's view of the replicas: sticks to one until it fails, then moves to a live one serving the same version. */
export class ReplicaPool implements ModelClient {
  private readonly replicas: string[];
  private readonly health: ReplicaHealth;
  private readonly fetchFn: typeof fetch;
  private current: string | undefined;
  /** The adapter identity of the replica this rollout sampled from first; every later replica must match it. */
  private identity: string | undefined;
  /** Replicas that sampled a turn of this rollout, in order of first use. */
  readonly used: string[] = [];

  constructor(private readonly opts: ReplicaPoolOptions) {
    const preferred = replicaName(opts.preferred);
    const all = opts.replicas.map(replicaName);
    const at = Math.max(0, all.indexOf(preferred));
    // Preferred first, then the others in the run's order after it (rollouts spread over the rest alike).
    this.replicas = all.includes(preferred) ? [...all.slice(at), ...all.slice(0, at)] : [preferred, ...all];
    this.health = opts.health ?? new ReplicaHealth();
    this.fetchFn = opts.fetch ?? fetch;
  }

  async complete(req: CompletionRequest): Promise<PooledCompletion> {
    const passedOver = new Map<string, string>();
    let lastErr: unknown;
    for (;;) {
      const url = this.current ?? await this.pick(req, passedOver, lastErr);
      try {
        const c = await this.opts.clientFor(url).complete(req);
        if (!this.used.includes(url)) this.used.push(url);
        this.health.markUp(url);
        return { ...c, replica: url };
      } catch (err) {
        if (req.signal?.aborted || this.replicas.length < 2 || !isReplicaDown(err)) throw err;
        this.opts.log?.warn({ replica: url, model: req.model, err: (err as Error).message }, 'inference replica is down; the rollout moves to another replica');
        this.health.markDown(url);
        passedOver.set(url, `down: ${(err as Error).message}`);
        this.current = undefined;
        lastErr = err;
      }
    }
  }

  /** The first replica, preferred first, that is up and serves the rollout's model from the same adapter. */
  private async pick(req: CompletionRequest, passedOver: Map<string, string>, lastErr: unknown): Promise<string> {
    if (this.replicas.length === 1) return (this.current = this.replicas[0]!);
    // Replicas another rollout saw down go last, not never: the hold may be out of date.
    const order = [...this.replicas.filter((u) => !this.health.isDown(u)), ...this.replicas.filter((u) => this.health.isDown(u))];
    for (const url of order) {
      if (passedOver.has(url)) continue;
      const probe = await this.probe(url, req);
      if (probe.kind === 'serves') {
        this.identity ??= probe.identity;
        if (this.used.length > 0 || passedOver.size > 0) this.opts.log?.info({ replica: url, model: req.model, passedOver: Object.fromEntries(passedOver) }, 'rollout continues on another replica that serves its version');
        return (this.current = url);
      }
      if (probe.kind === 'down') this.health.markDown(url);
      passedOver.set(url, `${probe.kind}: ${probe.why}`);
    }
    // The error the last replica gave, so the rollout fails as it did before the pool (inference down).
    if (lastErr !== undefined) throw lastErr;
    throw new NoReplicaServes(`no inference replica serves ${req.model}: ${[...passedOver].map(([u, why]) => `${u} ${why}`).join('; ')}`);
  }

  private async probe(url: string, req: CompletionRequest): Promise<Probe> {
    let body: { data?: { id: string; root?: string }[] };
    try {
      const signals = [AbortSignal.timeout(this.opts.probeTimeoutMs ?? 5_000), ...(req.signal ? [req.signal] : [])];
      const res = await this.fetchFn(`${url}/models`, { signal: AbortSignal.any(signals) });
      if (res.status >= 500) return { kind: 'down', why: `HTTP ${res.status}` };
      if (res.status !== 200) return { kind: 'behind', why: `/models answered HTTP ${res.status}` };
      body = await res.json() as typeof body;
    } catch (err) {
      req.signal?.throwIfAborted();
      return { kind: 'down', why: (err as Error).message };
    }
    const model = (body.data ?? []).find((m) => m.id === req.model);
    // A replica that missed the version's sync (it was down, or restarted since): not until a sync loads it.
    if (!model) return { kind: 'behind', why: `does not serve ${req.model} (not synced yet)` };
    const identity = adapterIdentity(model.root);
    // The same name loaded from another step attempt's adapter (a redone step) is other weights.
    if (this.identity !== undefined && identity !== undefined && identity !== this.identity) {
      return { kind: 'behind', why: `serves ${req.model} from ${identity}, this rollout sampled from ${this.identity}` };
    }
    return { kind: 'serves', identity };
  }
}

/**
 * The rollout worker's pools: one ReplicaPool per rollout over the run's replicas, sharing what
 * the worker learnt about which are down. One replica: no pool, the client itself.
 */
export function createReplicaPools(clientFor: (baseUrl: string) => ModelClient, opts: Pick<ReplicaPoolOptions, 'fetch' | 'probeTimeoutMs' | 'log'> & { health?: ReplicaHealth } = {}) {
  const health = opts.health ?? new ReplicaHealth();
  return (preferred: string, replicas?: readonly string[]): ModelClient => {
    if (!replicas || replicas.length < 2) return clientFor(preferred);
    return new ReplicaPool({ ...opts, replicas, preferred, clientFor, health });
  };
}
