/**
 * trainer.mode = "full": which weights a vLLM replica serves, checked before each turn is sampled.
 *
 * A full run's replicas serve every version under one name (inference.served_model), so a replica
 * that restarted answers as the base model where a LoRA replica answers 404 for its adapter. Before
 * each completion the rollout asks the replica's /v1/ratchet/weights (infra/vllm/ratchet_weights.py)
 * and samples only when every worker serves the rollout's checkpoint, or a later checkpoint of the
 * same run (async_level: the next version may land while the rollout runs). Otherwise it throws
 * ServedWeightsMismatch: the replica pool moves the rollout to another replica, and the rollout
 * activity reports it as InferenceUnavailable, which StepRollouts answers with the version's sync
 * (the sync reloads a replica that reports other weights), then runs the chunk's missing rollouts.
 */
import type { Completion, CompletionRequest, ModelClient } from './model';
import { replicaName } from '../shared/replicas';

/** The weights a full run's rollout expects: its policy version's checkpoint (absent at version 0: the base model). */
export interface ExpectedWeights {
  runId: string;
  policyVersion: number;
  /** The checkpoint's URI (`.../runs/<run>/checkpoints/step-<n>-<hash>`); absent: the base model. */
  checkpoint?: string;
}

/** A replica that serves other weights than the rollout's version (a restart brought it back on the base model). */
export class ServedWeightsMismatch extends Error {
  override readonly name = 'ServedWeightsMismatch';
  constructor(message: string, readonly replica: string, readonly served: string[]) {
    super(message);
  }
}

const segments = (p: string): string[] => p.split(/[\\/]+/).filter((s) => s.length > 0);

/** `step-<n>...` -> n. */
const stepOf = (seg: string): number | undefined => {
  const m = /^step-(\d+)(?:[-.]|$)/.exec(seg);
  return m ? Number(m[1]) : undefined;
};

/**
 * The run's checkpoint a served directory belongs to: `<run>/checkpoints/<step-seg>/model` in it (a local
 * checkpoint's model/, or an inference host's cache of it, which keeps the object key, src/artifacts/s3.ts).
 */
export function servedCheckpointOf(dir: string, runId: string): { seg: string; step: number } | undefined {
  const s = segments(dir);
  for (let i = 1; i + 2 < s.length; i++) {
    if (s[i] !== 'checkpoints' || s[i - 1] !== runId || s[i + 2] !== 'model') continue;
    const step = stepOf(s[i + 1]!);
    if (step !== undefined) return { seg: s[i + 1]!, step };
  }
  return undefined;
}

/** Why `paths` (each worker's weights directory) is not the expected weights; undefined when it is. */
export function weightsMismatch(expected: ExpectedWeights, base: string, paths: string[]): string | undefined {
  if (paths.length === 0) return 'its workers report no weights directory';
  const want = expected.checkpoint ? segments(expected.checkpoint).at(-1)! : undefined;
  const wantStep = want === undefined ? undefined : stepOf(want);
  const trim = (p: string) => p.replace(/[\\/]+$/, '');
  for (const p of paths) {
    const cp = servedCheckpointOf(p, expected.runId);
    // A later checkpoint of the run: the next version landed while this rollout runs (docs/gpu.md, "One set of weights a replica").
    const later = cp !== undefined && (wantStep === undefined || cp.step > wantStep);
    const ok = want === undefined ? trim(p) === trim(base) || later : cp?.seg === want || later;
    if (!ok) {
      const what = trim(p) === trim(base) ? `the base model (${p}): a restarted replica` : p;
      return `serves ${what}, not ${want === undefined ? 'the base model' : `checkpoint ${want}`} (policy version ${expected.policyVersion} of run ${expected.runId})`;
    }
  }
  return undefined;
}

export interface ServedWeightsOptions {
  fetch?: typeof fetch;
  /** How long one answer of a replica stands for its rollouts (a restart takes far longer: vLLM loads the model again). */
  ttlMs?: number;
  timeoutMs?: number;
  now?: () => number;
  apiKey?: string;
}

type State = { base: string; paths: string[] };

/**
 * One rollout worker's view of its replicas' weights: GET /v1/ratchet/weights, at most once per replica
 * per `ttlMs` however many rollouts ask, and again at once after a request to the replica failed.
 */
export class ServedWeights {
  private readonly answers = new Map<string, { at: number; state: Promise<State> }>();
  private readonly fetchFn: typeof fetch;
  private readonly now: () => number;

  constructor(private readonly opts: ServedWeightsOptions = {}) {
    this.fetchFn = opts.fetch ?? fetch;
    this.now = opts.now ?? Date.now;
  }

  forget(replica: string): void {
    this.answers.delete(replicaName(replica));
  }

  /** Throws ServedWeightsMismatch unless `replica` serves `expected`; returns the directory its workers serve. */
  async check(replica: string, expected: ExpectedWeights): Promise<string> {
    const url = replicaName(replica);
    let a = this.answers.get(url);
    if (!a || this.now() - a.at > (this.opts.ttlMs ?? 1_000)) {
      // Not under the asking rollout's signal: other rollouts share the answer.
      a = { at: this.now(), state: this.ask(url) };
      this.answers.set(url, a);
      a.state.catch(() => { if (this.answers.get(url) === a) this.answers.delete(url); });
    }
    const { base, paths } = await a.state;
    const why = weightsMismatch(expected, base, paths);
    if (why !== undefined) {
      // Asked again next time: the sync that answers this reloads the replica.
      this.forget(url);
      throw new ServedWeightsMismatch(`inference replica ${url} ${why}. The step syncs the version into it, then runs the chunk's missing rollouts`, url, paths);
    }
    return paths[0]!;
  }

  private async ask(url: string): Promise<State> {
    const key = this.opts.apiKey ?? process.env.RATCHET_INFERENCE_API_KEY;
    // A network error is thrown as it is: the replica is down (isReplicaDown), as for a completion.
    const res = await this.fetchFn(`${url}/ratchet/weights`, { signal: AbortSignal.timeout(this.opts.timeoutMs ?? 10_000), ...(key ? { headers: { authorization: `Bearer ${key}` } } : {}) });
    const text = await res.text();
    if (res.status !== 200) {
      // 404: restarted without Ratchet's hooks; the sync then fails naming the fix (WeightSyncRefused).
      throw new ServedWeightsMismatch(`inference replica ${url} could not say which weights it serves (GET /v1/ratchet/weights: HTTP ${res.status} ${text.slice(0, 200)}). ` +
        'The step syncs the version into it, then runs the chunk\'s missing rollouts', url, []);
    }
    const body = JSON.parse(text) as { base?: unknown; paths?: unknown };
    return { base: typeof body.base === 'string' ? body.base : '', paths: Array.isArray(body.paths) ? body.paths.map(String) : [] };
  }
}

/** A replica's client that samples only while the replica serves `expected`; each completion names the directory it came from. */
export function guardServedWeights(client: ModelClient, replica: string, expected: ExpectedWeights, weights: ServedWeights): ModelClient {
  return {
    async complete(req: CompletionRequest): Promise<Completion> {
      const dir = await weights.check(replica, expected);
      try {
        return { ...(await client.complete(req)), weights: dir };
      } catch (err) {
        // The replica may have restarted under this request: ask again before the next one.
        weights.forget(replica);
        throw err;
      }
    },
  };
}
