import { z } from 'zod';
import { LIVENESS_DEFAULTS as LD } from '../shared/liveness';
import { CHUNKS_PER_SHARD, ROLLOUTS_PER_CHUNK } from './fanout';
import { COST_KEYS, type CostKey } from '../shared/cost';
import { EVAL_EVERY_STEPS_MAX, EVAL_K_MAX } from './evalBounds';
import { DEFAULT_FAIRNESS_WEIGHT, FAIRNESS_WEIGHT_MAX, FAIRNESS_WEIGHT_MIN } from '../shared/fairness';
import { ArtifactRef } from '../artifacts/ref';

/**
 * The run config (`configs/<env>/<name>.toml`). Sections mirror prime-rl's
 * train/infer/orch files from seed 001, folded into one file per run.
 * Pure: workflow code imports the types.
 */

/**
 * Bounds: every numeric setting has a range the validator enforces, chosen so
 * that a value inside it cannot break a part of the stack by itself (Node's
 * timers, the worker's memory, Docker's limits, Temporal's payloads). Settings
 * that depend on each other are checked together in crossChecks.ts; limits that
 * depend on the host (Docker's CPUs and memory) in src/check/host.ts.
 */

/** Node's setTimeout holds a signed 32-bit millisecond count: anything longer fires at once. */
export const MAX_TIMER_S = Math.floor((2 ** 31 - 1) / 1000);
/** Seeds travel to vLLM and torch as unsigned 32-bit ints. */
const Seed = z.number().int().min(0).max(2 ** 32 - 1);
/** The longest context any supported model has; larger is a typo. */
export const MAX_SEQ_LEN = 131_072;

const LoraConfig = z.object({
  rank: z.number().int().positive().max(1024).default(8),
  alpha: z.number().positive().max(65_536).default(16),
  dropout: z.number().min(0).lt(1).default(0),
  target_modules: z.array(z.string()).nonempty().default(['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']),
}).strict();

/**
 * The [trainer] section is the Python trainer's config (trainer/ratchet_trainer/core/config.py):
 * the same keys, nesting, defaults and choices, passed through unchanged (src/workflows/trainerConfig.ts
 * adds model.path, seq_len and loss.temperature from their own sections).
 * test/unit/config/schema.test.ts fails on any difference between the two.
 */
export const TrainerConfig = z.object({
  /** "lora" trains an adapter that vLLM loads at run time; "full" trains every weight. */
  mode: z.enum(['lora', 'full']).default('lora'),
  lora: LoraConfig.default({}),
  /** How the trainer builds the model; its weights come from [model].path. */
  model: z.object({
    /** auto: bfloat16 on CUDA, float32 on the CPU. */
    dtype: z.enum(['auto', 'bfloat16', 'float16', 'float32']).default('auto'),
    /** auto: FlexAttention (document mask) for packed rows on CUDA, SDPA otherwise. */
    attn_implementation: z.enum(['auto', 'sdpa', 'eager', 'flex_attention', 'flash_attention_2']).default('auto'),
    /** auto: adapters compute in the base dtype with fp32 master weights; float32: fp32 adapters (slower). */
    lora_dtype: z.enum(['auto', 'float32']).default('auto'),
    /**
     * torch.compile each decoder layer (`auto`: on CUDA only). Off by default: on RL-shaped batches
     * (a new packed length every micro-batch) it recompiled every few steps on an H100 and had not
     * paid back its compile time after 22 steps (BENCHMARKS.md, "compile on RL-shaped batches").
     */
    compile: z.union([z.boolean(), z.literal('auto')]).default(false),
  }).strict().default({}),
  optim: z.object({
    /** 0 is allowed: a control run (bench:learn) with every other setting the same. */
    lr: z.number().min(0).max(1).default(1e-5),
    weight_decay: z.number().min(0).max(1).default(0),
    betas: z.tuple([z.number().min(0).lt(1), z.number().min(0).lt(1)]).default([0.9, 0.999]),
    eps: z.number().positive().max(1).default(1e-8),
    max_grad_norm: z.number().positive().max(1e6).default(1.0),
  }).strict().default({}),
  /** Gradient checkpointing: every `freq` layers (0 = off), as prime-rl's [model.ac]. */
  ac: z.object({ freq: z.number().int().min(0).max(1024).default(0) }).strict().default({}),
  loss: z.object({
    /**
     * grpo: token-level ratio; gspo: sequence-level ratio; sft: supervised fine-tuning,
     * the negative log-likelihood of exactly the policy's tokens (the loss mask), for `SftRun`.
     */
    kind: z.enum(['grpo', 'gspo', 'sft']).default('grpo'),
    /** Clip range; unset: the loss's own (grpo 0.2/0.28, gspo 3e-4/4e-4: GSPO clips a sequence ratio). */
    eps_low: z.number().min(0).max(1).optional(),
    eps_high: z.number().min(0).max(10).optional(),
    /**
     * Over trajectories (a trajectory split into segments weighs as one):
     * "token": mean over the batch's trainable tokens (DAPO); "dr_grpo": sum over a
     * constant, trajectories x seq_len (Dr.GRPO); "sequence": mean per trajectory, then over trajectories.
     */
    normalization: z.enum(['token', 'sequence', 'dr_grpo']).default('dr_grpo'),
    kl_coef: z.number().min(0).max(100).default(0),
    /** Dr.GRPO's constant normaliser; unset: orchestrator.seq_len. */
    max_tokens: z.number().int().positive().max(MAX_SEQ_LEN).optional(),
    /** Mean |ratio - 1| above this is reported as the trainer's `mismatch_exceeded` metric. */
    mismatch_tolerance: z.number().min(0).max(100).default(0.05),
    /**
     * Bounds the train/inference mismatch (docs/training.md, "Which bounds act"). Three policies:
     * behaviour (vLLM's logprobs), proximal (the trainer's before the batch's first update), current.
     * "tis" and "icepop" are decoupled: the clips act on current / proximal, and each token is weighted
     * by min(pi_proximal / pi_vllm, tis_cap) (tis) or by pi_proximal / pi_vllm, dropped outside
     * [icepop_low, icepop_high] (icepop). "mask" and "none" clip current / behaviour; "mask" drops tokens
     * whose |logprob difference| exceeds mask_threshold. With one update per batch (minibatches =
     * epochs = 1) the decoupled ratio is 1: eps_low, eps_high and dual_clip cannot act there.
     */
    correction: z.enum(['tis', 'icepop', 'mask', 'none']).default('tis'),
    tis_cap: z.number().min(1).max(1000).default(2),
    mask_threshold: z.number().positive().max(100).default(1),
    icepop_low: z.number().gt(0).max(1).default(0.5),
    icepop_high: z.number().min(1).max(1000).default(2),
    /** Negative advantages: the objective is bounded below by dual_clip x A (0 = off). */
    dual_clip: z.number().min(0).max(1000).refine((c) => c === 0 || c > 1, 'must be 0 (off) or > 1').default(3),
  }).strict().default({}),
  /**
   * The GPUs the trainer runs on, for `ratchet check`'s memory estimate (src/check/gpu.ts):
   * `memory_gib` of one GPU and `count` ranks (FSDP shards weights and optimizer state over them).
   * Unset: the estimate is printed, the fit is not checked.
   */
  gpu: z.object({
    memory_gib: z.number().positive().max(4096).optional(),
    count: z.number().int().positive().max(4096).default(1),
    /** The GPUs (nvidia-smi indices) `ratchet up` starts the trainer's ranks on; unset: 0 .. count-1 (src/layout). */
    devices: z.array(z.number().int().min(0).max(1023)).nonempty().optional(),
  }).strict().default({}),
  /**
   * Optimizer updates per batch: the batch's trajectories in `minibatches` parts (balanced by
   * tokens), one update each, all of them `epochs` times. Above one update the clips bound each
   * update against the proximal policy (the trainer's before the batch's first update).
   */
  minibatches: z.number().int().min(1).max(1024).default(1),
  epochs: z.number().int().min(1).max(100).default(1),
  /** Tokens per micro-batch; gradient accumulation covers the rest of the batch. */
  micro_batch_tokens: z.number().int().positive().max(4 * MAX_SEQ_LEN).default(4096),
  /** Logprobs from the last hidden states this many tokens at a time (0: from the full logits). */
  logprob_chunk_tokens: z.number().int().min(0).max(4 * MAX_SEQ_LEN).default(1024),
  /** Several samples per row, block-diagonal attention; `auto`: on CUDA only (see trainer/README.md). */
  packing: z.union([z.boolean(), z.literal('auto')]).default('auto'),
  /**
   * Samples sharing a token prefix (the episode's preamble, a group's prompt) in one row as a prefix tree, the
   * prefix computed once; same loss and gradients. `auto`: where packing is off and attention is sdpa or eager.
   */
  shared_prefix: z.union([z.boolean(), z.literal('auto')]).default('auto'),
  device: z.enum(['auto', 'cpu', 'cuda']).default('auto'),
  /**
   * Several ranks: `replicate` keeps the whole model on every GPU and sums the trainable gradients once
   * per optimizer step; `fsdp` shards it (FSDP2). `auto`: replicate when the one-GPU memory estimate
   * fits (src/check/gpu.ts; the trainer measures its GPUs' free memory), else fsdp. docs/gpu.md.
   */
  parallelism: z.enum(['auto', 'replicate', 'fsdp']).default('auto'),
  /** Seeds the trainer's RNG (LoRA init, per-step dropout draws). */
  seed: Seed.default(0),
}).strict();

const InferenceConfig = z.object({
  /** One or more OpenAI-compatible servers (vLLM); rollouts are spread over them. */
  base_urls: z.array(z.string().url()).nonempty().default(['http://127.0.0.1:8000/v1']),
  served_model: z.string().default('smollm2-135m'),
  request_timeout_s: z.number().positive().max(MAX_TIMER_S).default(300),
  /**
   * Inference hosts that share no disk with the trainer: each runs a `ratchet-inference`
   * worker (src/workers/inference.ts) on its own task queue, which pulls each new adapter
   * from the artifact store into a local cache and loads it into that host's vLLM.
   * Empty: weight sync hands vLLM the adapter path directly (one machine, or a shared disk).
   */
  /**
   * vLLM's --gpu-memory-utilization when it runs on the trainer's GPU(s): the share of each
   * GPU's memory vLLM takes (weights + KV cache). `ratchet check` then requires the trainer's
   * estimated peak to fit in the rest (trainer.gpu.memory_gib x (1 - this)). Unset: vLLM has GPUs of its own.
   */
  gpu_memory_utilization: z.number().gt(0).lt(1).optional(),
  /**
   * On a GPU host (trainer.device = "cuda"), the GPU group of each vLLM replica `ratchet up` starts, one per
   * base_urls entry (a group of several GPUs is one tensor-parallel replica). Unset: the trainer's GPUs split
   * evenly over the replicas when vLLM shares them (gpu_memory_utilization set), else the GPUs after the trainer's (src/layout).
   */
  gpus: z.array(z.array(z.number().int().min(0).max(1023)).nonempty()).nonempty().optional(),
  sync_task_queues: z.array(z.string().regex(/^[A-Za-z0-9._-]+$/, 'a task queue name: letters, digits, ".", "_" and "-"')).default([]),
  /**
   * How many replicas must load a new policy version before the next step's rollouts start
   * (inference hosts when sync_task_queues is set, else base_urls). Unset: a strict majority
   * (1 of 1, 2 of 2, 2 of 3). The replicas that missed it are recorded as behind in the step's
   * weight_sync record, and get no rollouts until a later sync brings them to the current version
   * (src/agent/replicaPool.ts). With two replicas, 1 lets the run go on when either dies.
   */
  sync_quorum: z.number().int().min(1).max(1024).optional(),
}).strict();

const SamplingConfig = z.object({
  temperature: z.number().min(0).max(10).default(1.0),
  top_p: z.number().gt(0).max(1).default(1.0),
  /**
   * 0 = off (every token). Always sent, so a model's generation config (Qwen3's
   * sets top_k = 20) never narrows sampling behind the run's back.
   */
  top_k: z.number().int().min(0).default(0),
  /** Tokens per model turn. */
  max_tokens: z.number().int().positive().max(MAX_SEQ_LEN).default(256),
  /**
   * `auto`: the model may answer in text. `required`: every turn starts with the tool-call
   * opening (`<tool_call>` and a newline) as prompt and the policy writes the call from there,
   * which keeps small models acting. The opening is no decision of the policy: it is never
   * trained, and nothing narrows what the policy samples (no grammar), so vLLM's logprobs and
   * the trainer's are of one distribution (`sampling.distribution_match` in the batch manifest).
   */
  tool_choice: z.enum(['auto', 'required']).default('auto'),
  /**
   * `tokens`: each turn's prompt is the last prompt, the ids the policy sampled and the new
   * messages rendered by the template: an episode is one training sample. `template`: the chat
   * template renders the whole conversation every turn (its own contexts, e.g. Qwen3 dropping
   * past reasoning); the batch builder starts a new sample wherever that rewrote a sampled turn.
   */
  history: z.enum(['tokens', 'template']).default('tokens'),
}).strict();

const OrchestratorConfig = z.object({
  batch_size: z.number().int().positive().max(10_000).default(2),
  rollouts_per_example: z.number().int().positive().max(1024).default(4),
  seq_len: z.number().int().min(64).max(MAX_SEQ_LEN).default(2048),
  max_steps: z.number().int().positive().max(1_000_000).default(3),
  mask_truncated_completions: z.boolean().default(false),
  /** How many policy versions a rollout may lag the trainer (prime-rl's async_level). */
  async_level: z.number().int().min(0).max(8).default(0),
  /**
   * In-flight rollouts at once, spread over the shards (ratchet check bounds each), in whole chunks;
   * a chunk runs at most this many of its rollouts at once.
   */
  max_concurrent_rollouts: z.number().int().positive().max(65_536).default(8),
  /**
   * Rollouts one activity runs at once (src/activities/rolloutChunk.ts): its input is a reference to the step
   * manifest and a range, each finished rollout is stored at once, and a retry runs only what is missing.
   * 0 was the pre-0.6 per-rollout fan-out, removed in 0.8 (docs/upgrades.md).
   */
  rollouts_per_chunk: z.number().int().min(ROLLOUTS_PER_CHUNK.min, {
    message: `must be ${ROLLOUTS_PER_CHUNK.min}-${ROLLOUTS_PER_CHUNK.max}; 0 (one activity per rollout, tasks inline) was the pre-0.6 fan-out, ` +
      `removed in 0.8. Fix: remove the key (default ${ROLLOUTS_PER_CHUNK.default}) or set ${ROLLOUTS_PER_CHUNK.min}-${ROLLOUTS_PER_CHUNK.max}`,
  }).max(ROLLOUTS_PER_CHUNK.max).default(ROLLOUTS_PER_CHUNK.default),
  /**
   * Chunks one shard child of StepRollouts runs (a step of more chunks is spread over shards; a shard continues as new as it grows).
   * Unset: 64, and more once a step would need over 16 shards (src/config/fanout.ts).
   */
  chunks_per_shard: z.number().int().min(CHUNKS_PER_SHARD.min).max(CHUNKS_PER_SHARD.max).optional(),
  /**
   * This run's share of shared rollout and trainer workers against other runs' (docs/architecture.md
   * "Runs share workers fairly"): a run of weight 2 gets twice the dispatches of a run of weight 1
   * while both have rollouts waiting, whatever their sizes.
   */
  fairness_weight: z.number().min(FAIRNESS_WEIGHT_MIN).max(FAIRNESS_WEIGHT_MAX).default(DEFAULT_FAIRNESS_WEIGHT),
  advantage: z.object({
    /** rloo: each rollout's baseline is the mean of the other rollouts of its group (leave-one-out). */
    kind: z.enum(['grpo', 'dr_grpo', 'rloo']).default('grpo'),
    /** GRPO only (Dr.GRPO and RLOO never divide by the group std); setting it true with either is an error. */
    std_normalize: z.boolean().default(true),
    drop_uniform_groups: z.boolean().default(false),
  }).strict().default({}),
  /**
   * Episodes the agent loop ended at a limit (stop_reason max_turns, max_tool_calls, context_length,
   * max_tokens): "score" trains on them with their reward like any episode; "mask" leaves them out of
   * the loss (no trainable token) and out of their group's baseline, so running out of turns is not
   * taught as a failure. The step's mean reward counts them either way.
   */
  limit_ended: z.enum(['score', 'mask']).default('score'),
  /**
   * Online difficulty filtering: a group whose rollouts all score alike has every advantage 0 and
   * teaches nothing. When enabled, such groups are dropped and the step samples more tasks, in up to
   * `max_refill_rounds` further rounds, until it has batch_size informative groups; the batch holds
   * the informative groups only. Off by default: every refill round costs a round of rollouts.
   */
  difficulty_filter: z.object({
    enabled: z.boolean().default(false),
    max_refill_rounds: z.number().int().min(1).max(16).default(2),
  }).strict().default({}),
  /**
   * Per-task pass-rate pools: the run counts each task's rollouts and passes (reward >= pass_reward)
   * and samples tasks by weight 4p(1-p), so tasks it solves sometimes come first; a task never rolled
   * out weighs 1 (explored), one always failed or always passed weighs `floor`. Off by default: the
   * epoch walk, which sees every task once per epoch.
   */
  pass_rate_pool: z.object({
    enabled: z.boolean().default(false),
    pass_reward: z.number().min(-1e6).max(1e6).default(1),
    floor: z.number().min(0).max(1).default(0.05),
  }).strict().default({}),
  /** What to do when a chat template breaks multi-turn prefixes: one sample per turn, or fail. */
  non_prefix_policy: z.enum(['split', 'fail']).default('split'),
  allow_retokenize: z.boolean().default(false),
  continue_as_new_every: z.number().int().positive().max(1000).default(50),
  seed: Seed.default(0),
}).strict();

/** The environments that ship in src/envs; any other id needs `module`. */
export const BUILTIN_ENV_IDS = ['swe-grep', 'code-repair', 'debug', 'harbor', 'nano', 'mini-swe-agent'] as const;

const EnvConfig = z.object({
  /** A built-in environment, or the name of the one `module` exports. */
  id: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'use letters, digits, ".", "_" and "-" only'),
  /**
   * An environment outside this repository (docs/environments.md): a local
   * module path (relative to the repository root, or absolute) or an installed
   * npm package name, exporting an environment definition named by `id`.
   */
  module: z.string().min(1).optional(),
  /** A JSONL or Parquet task file; relative paths resolve against the task set dir. */
  dataset: z.string().default('train.jsonl'),
  weight: z.number().positive().max(1e6).default(1),
  args: z.object({
    max_tokens: z.number().int().positive().max(MAX_SEQ_LEN).default(2048),
    max_tool_calls: z.number().int().positive().max(1000).default(10),
    max_turns: z.number().int().positive().max(1000).default(12),
    /** Show the environment's worked example episode before the task (helps small models use the tools). */
    few_shot: z.boolean().default(false),
    /** A wording of the prompt the environment offers (swe-grep: "compact"); unset: its own. */
    prompt: z.string().min(1).optional(),
  }).passthrough().default({}),
  /** Reward component weights, by component name; missing ones use the environment's defaults. */
  rubric: z.record(z.number().min(-1e6).max(1e6)).default({}),
}).strict();

const SandboxConfig = z.object({
  image: z.string().optional(),
  /** Docker refuses less than 6 MiB; git and python in the sandbox need far more. The host's memory is the upper bound (ratchet check). */
  memory_mb: z.number().int().min(64).max(1_048_576).default(512),
  /** Docker's --cpus granularity is 0.01; the host's CPU count is the upper bound (ratchet check). */
  cpus: z.number().min(0.01).max(1024).default(1),
  /** Below 16 a shell, git and pytest cannot start together. */
  pids_limit: z.number().int().min(16).max(32_768).default(128),
  disk_mb: z.number().int().min(16).max(1_048_576).default(256),
  /** An hour at most: one tool call longer than that is a hang; past MAX_TIMER_S Node's timer fires at once. */
  exec_timeout_s: z.number().positive().max(3600).default(20),
  /** Held in the worker's memory per exec and sent to the model: 1 MiB at most. */
  output_limit_bytes: z.number().int().min(256).max(1_048_576).default(16_384),
  warm_pool_size: z.number().int().min(0).max(64).default(2),
  /**
   * Hard lifetime of every sandbox container, from its start: its PID 1 child is `sleep <this>`, so the
   * container exits by itself even if every worker died (docs/operations.md, "What a run costs and budgets").
   * Longer than any one episode: the rollout activity's 30-minute timeout, plus margin.
   */
  max_lifetime_s: z.number().int().min(1).max(7 * 24 * 3600).default(3600),
}).strict();

/**
 * Optional budgets (docs/operations.md, "What a run costs and budgets"): `max_<figure>` for any figure of
 * the cost ledger (src/shared/cost.ts). At a step boundary, a run whose cost has reached one pauses with
 * status budget-exhausted until `ratchet set --budget <figure>=<value>` raises it.
 */
const BudgetSection = z.object(Object.fromEntries(COST_KEYS.map((k) => [
  `max_${k}`, z.number({ invalid_type_error: `must be a number (the run's total ${k})` }).positive('must be above 0 (leave it out for no budget)').finite().optional(),
])) as Record<`max_${CostKey}`, z.ZodOptional<z.ZodNumber>>).strict();
export type BudgetSection = z.infer<typeof BudgetSection>;

/**
 * Heartbeats measure liveness; these windows measure progress (src/activities/liveness.ts,
 * trainer/ratchet_trainer/liveness.py). No progress within a window stops the activity's
 * heartbeat, so Temporal's heartbeat timeout (1 minute) retries it elsewhere. The defaults
 * are sized for the CPU stack, where one trainer micro-batch took over 2 minutes.
 */
const LivenessSection = z.object({
  /** How often a long activity heartbeats: at most a third of the 1-minute heartbeat timeout. */
  heartbeat_every_s: z.number().min(1).max(20).default(LD.heartbeat_every_s),
  /** Rollout and eval episode: no sandbox, model response, tool result or test run outcome for this long. */
  rollout_stall_s: z.number().min(30).max(24 * 3600).default(LD.rollout_stall_s),
  /** trainer.step/load/save: no micro-batch (or load/save phase) for this long. */
  trainer_stall_s: z.number().min(60).max(24 * 3600).default(LD.trainer_stall_s),
  /** Weight sync: no HTTP response from a vLLM replica for this long. */
  weight_sync_stall_s: z.number().min(45).max(3600).default(LD.weight_sync_stall_s),
}).strict();

/**
 * Where the run's artifacts live. `url` is `file:///abs/dir` or `s3://bucket/prefix`
 * (any S3-compatible store: AWS S3, MinIO...); unset means the worker's default
 * store (the local `.ratchet/artifacts`, or RATCHET_ARTIFACTS_URL). Credentials are
 * never here: the AWS SDK's default chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
 * AWS_PROFILE, instance roles) supplies them on every host.
 */
export const ArtifactsFields = z.object({
  url: z.string().refine((u) => /^file:\/\/\//.test(u) || /^s3:\/\/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](\/.*)?$/.test(u), {
    message: 'must be "file:///absolute/dir" or "s3://bucket/prefix" (bucket: 3-63 lowercase letters, digits, "." or "-")',
  }).optional(),
  /** Legacy spelling of a file:// url: a local directory. */
  root: z.string().optional(),
  /** S3 endpoint for a non-AWS store, e.g. "http://minio-host:9000" (AWS: leave unset). */
  endpoint: z.string().regex(/^https?:\/\/[^/\s]+/, 'must be a URL like "http://minio-host:9000"').optional(),
  /** S3 region (default: AWS_REGION / the profile's region, else us-east-1). */
  region: z.string().min(1).optional(),
  /** Path-style bucket addressing (http://host/bucket/key): MinIO needs it; default true when endpoint is set. */
  force_path_style: z.boolean().optional(),
}).strict();
/**
 * [artifacts.retention]: what a run keeps as it goes (src/records/retention.ts; `ratchet gc` applies the
 * same to a finished run). Absent: everything is kept, as before.
 */
export const RetentionConfig = z.object({
  /**
   * The newest checkpoints kept whole, optimizer state included: the run resumes from the newest and a
   * checkpoint fallback goes back to the others, so at least 2. Older ones are deleted (but see keep_every).
   */
  keep_last: z.number().int().min(2).default(3),
  /** Also keep the adapter (no optimizer or trainer state) of every policy version that is a multiple of this; 0: none. */
  keep_every: z.number().int().min(0).default(0),
  /** Delete a step's turn-resume journals once the step is recorded (no retry of its rollouts can need them). */
  journals: z.boolean().default(true),
}).strict();
export type RetentionConfig = z.output<typeof RetentionConfig>;

export const ArtifactsConfig = ArtifactsFields.extend({ retention: RetentionConfig.optional() }).superRefine((a, ctx) => {
  const s3 = a.url?.startsWith('s3://') ?? false;
  for (const k of ['endpoint', 'region', 'force_path_style'] as const) {
    if (a[k] !== undefined && !s3) {
      ctx.addIssue({ code: z.ZodIssueCode.custom, path: [k], message: `only applies to an S3 store; set url = "s3://bucket/prefix" too, or remove ${k}` });
    }
  }
  if (a.url && a.root) ctx.addIssue({ code: z.ZodIssueCode.custom, path: ['root'], message: 'set url or root, not both (root is the old spelling of a file:// url)' });
});
export type ArtifactsConfig = z.infer<typeof ArtifactsConfig>;

/** Where step metrics go besides runs/<run>/metrics.jsonl, the HTML report and Prometheus. */
const MetricsConfig = z.object({
  /** TensorBoard event files: `tensorboard --logdir <dir>`. Relative dirs resolve against the repository root. */
  tensorboard: z.object({
    /** Default: <artifacts>/runs/<run>/tensorboard. Each run writes its own subdirectory <dir>/<run>. */
    dir: z.string().min(1).optional(),
  }).strict().optional(),
  /**
   * Weights & Biases, through a small Python sink (src/metrics/sinks/wandb_sink.py,
   * installed by infra/metrics-env.sh). "offline" needs no network; sync later with `wandb sync`.
   */
  wandb: z.object({
    project: z.string().min(1).default('ratchet'),
    entity: z.string().min(1).optional(),
    mode: z.enum(['offline', 'online']).default('offline'),
    /** Default: <artifacts>/runs/<run>/wandb. */
    dir: z.string().min(1).optional(),
  }).strict().optional(),
}).strict();

/**
 * [sft]: what an SftRun (`ratchet sft`) trains on. The trajectories are Ratchet's own
 * (ratchet.trajectory/v1, one a line: scripted demonstrations, the successful episodes of a
 * run, or your own); they are checked against the model's template and frozen into the run's
 * store when the run opens (src/sft/). TrainRun ignores this section.
 */
export const SftSection = z.object({
  /** JSONL files of trajectories, relative to the directory the worker runs in. */
  data: z.array(z.string().min(1)).nonempty('name at least one JSONL file of trajectories, e.g. data = ["demos.jsonl"]'),
  /** Rejection sampling: keep completed trajectories whose reward is at least this. Unset: keep every trajectory. */
  min_reward: z.number().min(-1e6).max(1e6).optional(),
  /** Trajectories per step. */
  batch_size: z.number().int().positive().max(10_000).default(8),
}).strict();
export type SftSection = z.infer<typeof SftSection>;

/** `init_from`'s forms: a run id, or a run id and one of its steps. */
export const INIT_FROM_RE = /^([^@\s/]+)(?:@(\d+))?$/;

/** `[model] init_from` as the run resolved it when it opened: the checkpoint and adapter the run starts from. */
export const InitResolved = z.object({
  /** The setting as written. */
  from: z.string(),
  run_id: z.string(),
  /** The origin run's step whose checkpoint this is. */
  step: z.number().int().nonnegative(),
  /** The origin run's policy version at that checkpoint. */
  policy_version: z.number().int().nonnegative(),
  checkpoint: ArtifactRef,
  adapter: ArtifactRef,
}).strict();
export type InitResolved = z.infer<typeof InitResolved>;

/**
 * [eval]: the in-run eval cadence. Every `every_steps` steps (after the steps whose count of finished
 * steps is a multiple of it: 2 -> after steps 1, 3, 5...) TrainRun starts an EvalSweep child on the
 * checkpoint that step just saved, on the held-out `taskset`, below training by priority; training does
 * not wait for it. 0 is off. `ratchet set <run> --eval-every N` changes it on a running run.
 */
export const EvalSection = z.object({
  every_steps: z.number().int().min(0).max(EVAL_EVERY_STEPS_MAX).default(0),
  /** As `ratchet eval --taskset`: a name under .ratchet/tasks (`heldout` -> .ratchet/tasks/heldout.jsonl) or a JSONL path. */
  taskset: z.string().min(1).default('heldout'),
  /** Samples per task (pass@k's n). */
  k: z.number().int().min(1).max(EVAL_K_MAX).default(4),
  /** Eval rollouts in flight at once, per sweep. */
  max_concurrent: z.number().int().min(1).max(1000).default(4),
}).strict();
export type EvalSection = z.infer<typeof EvalSection>;

export const RunConfig = z.object({
  name: z.string().regex(/^[A-Za-z0-9._-]+$/, 'use letters, digits, ".", "_" and "-" only').optional(),
  model: z.object({
    /** Local Hugging Face directory: weights, tokenizer.json and chat template. */
    path: z.string().default('.ratchet/models/SmolLM2-135M-Instruct'),
    name: z.string().default('SmolLM2-135M-Instruct'),
    /**
     * A Hugging Face hub repo id ("Qwen/Qwen3-8B"): set-up fetches it once into `path` where the hub is
     * reachable (`bash infra/main.sh <config>`); nothing downloads at run time. Unset: `path` must hold the files.
     */
    hub: z.string().regex(/^[A-Za-z0-9][\w.-]*\/[\w.-]+$/, 'a hub repo id "<org>/<name>", e.g. "Qwen/Qwen3-8B"').optional(),
    /**
     * Warm start: the run's first adapter is another run's (an SftRun's last checkpoint, or any
     * run's step checkpoint): "<run>" or "<run>@<step>", in this run's artifact store. Resolved and
     * verified when the run opens (src/records/initFrom.ts); docs/training.md, "Warm start".
     */
    init_from: z.string().regex(INIT_FROM_RE, 'use "<run id>" or "<run id>@<step>", e.g. init_from = "sft-1" or "sft-1@3"').optional(),
    /** Set by the run when it opens: init_from resolved and verified. Never written in a TOML. */
    init: InitResolved.optional(),
  }).strict().default({}),
  trainer: TrainerConfig.default({}),
  inference: InferenceConfig.default({}),
  sampling: SamplingConfig.default({}),
  orchestrator: OrchestratorConfig.default({}),
  sandbox: SandboxConfig.default({}),
  env: z.array(EnvConfig).nonempty('add at least one [[env]] section, e.g. [[env]] id = "swe-grep"'),
  artifacts: ArtifactsConfig.default({}),
  liveness: LivenessSection.default({}),
  metrics: MetricsConfig.default({}),
  sft: SftSection.optional(),
  budget: BudgetSection.optional(),
  eval: EvalSection.default({}),
}).strict();

/**
 * Checks across sections, which zod's object schema cannot express without losing `.shape`:
 * a stall window shorter than a call's own timeout reads a slow, healthy call as a hang.
 */
export function crossFieldIssues(c: z.infer<typeof RunConfig>): { path: string[]; message: string }[] {
  const issues: { path: string[]; message: string }[] = [];
  const slowest = Math.max(c.inference.request_timeout_s, c.sandbox.exec_timeout_s * 3, 60);
  if (c.liveness.rollout_stall_s <= slowest) {
    issues.push({
      path: ['liveness', 'rollout_stall_s'],
      message: `${c.liveness.rollout_stall_s} must exceed the slowest single call of an episode (${slowest} s: inference.request_timeout_s, ` +
        `or 3 x sandbox.exec_timeout_s for the test run). Fix: raise liveness.rollout_stall_s above ${slowest}, or lower those timeouts`,
    });
  }
  // A lifetime shorter than one test run would kill sandboxes mid-episode, every time.
  if (c.sandbox.max_lifetime_s <= c.sandbox.exec_timeout_s * 3) {
    issues.push({
      path: ['sandbox', 'max_lifetime_s'],
      message: `${c.sandbox.max_lifetime_s} must exceed 3 x sandbox.exec_timeout_s (${c.sandbox.exec_timeout_s * 3} s: a test run) so a sandbox outlives its episode. ` +
        `Fix: raise sandbox.max_lifetime_s (default 3600), or lower sandbox.exec_timeout_s`,
    });
  }
  return issues;
}

export type RunConfig = z.infer<typeof RunConfig>;

/**
 * A config a run stored in its store, parsed. A run started on 0.6 or 0.7 with rollouts_per_chunk = 0 (the
 * per-rollout fan-out, removed in 0.8) reads it as the default: restarted, or continued as new on this build,
 * it runs its steps in chunks (docs/upgrades.md, "The per-rollout fan-out").
 */
export function storedRunConfig(raw: unknown): RunConfig {
  const o = (raw as { orchestrator?: Record<string, unknown> } | undefined)?.orchestrator;
  if (o?.rollouts_per_chunk !== 0) return RunConfig.parse(raw);
  const orchestrator = { ...o };
  delete orchestrator.rollouts_per_chunk;
  return RunConfig.parse({ ...(raw as object), orchestrator });
}
export type EnvConfig = z.infer<typeof EnvConfig>;
export type SandboxConfig = z.infer<typeof SandboxConfig>;
export type TrainerConfig = z.infer<typeof TrainerConfig>;
export type OrchestratorConfig = z.infer<typeof OrchestratorConfig>;
export type LivenessConfig = z.infer<typeof LivenessSection>;

/**
 * Settings that are each valid but together cannot be meant. Reads the raw
 * (pre-default) config to tell a key the user set from a default. Returns
 * "key.path: problem. Fix: ..." lines; empty when consistent.
 */
export function crossCheckRunConfig(raw: unknown, config: RunConfig): string[] {
  const r = (raw ?? {}) as { trainer?: { loss?: Record<string, unknown> }; orchestrator?: { advantage?: Record<string, unknown> } };
  const rawLoss = r.trainer?.loss ?? {};
  const rawAdv = r.orchestrator?.advantage ?? {};
  const loss = config.trainer.loss;
  const adv = config.orchestrator.advantage;
  const out: string[] = [];
  if (config.model.init_from !== undefined && config.trainer.mode !== 'lora') {
    out.push('model.init_from: starts the run from another run\'s LoRA adapter, but trainer.mode is "full". Fix: trainer.mode = "lora", or remove init_from');
  }
  if (loss.kind === 'sft') {
    out.push('trainer.loss.kind: "sft" is set by an SftRun itself (ratchet sft, with an [sft] section); a run config keeps its RL loss. ' +
      'Fix: remove kind, or set "grpo" or "gspo"');
  }
  if (adv.kind === 'dr_grpo' && rawAdv.std_normalize === true) {
    out.push('orchestrator.advantage.std_normalize: true with kind = "dr_grpo", which never divides by the group std (that is its fix). ' +
      'Fix: remove std_normalize, or use kind = "grpo"');
  }
  if (adv.kind === 'rloo' && rawAdv.std_normalize === true) {
    out.push('orchestrator.advantage.std_normalize: true with kind = "rloo", whose leave-one-out baseline is never divided by the group std. ' +
      'Fix: remove std_normalize, or use kind = "grpo"');
  }
  if (adv.kind === 'dr_grpo' && loss.normalization === 'sequence') {
    out.push('trainer.loss.normalization: "sequence" divides each trajectory by its own length, the bias Dr.GRPO removes, but ' +
      'orchestrator.advantage.kind is "dr_grpo". Fix: normalization = "dr_grpo" (or "token"), or advantage kind = "grpo"');
  }
  if (loss.kind === 'gspo' && rawLoss.normalization !== undefined && loss.normalization !== 'sequence') {
    out.push(`trainer.loss.normalization: "${loss.normalization}" with kind = "gspo", whose loss is a mean over trajectories of a ` +
      'sequence-level ratio; a token normalization would not be used. Fix: remove normalization or set it to "sequence"');
  }
  if (loss.kind === 'gspo' && Math.max(loss.eps_low ?? 0, loss.eps_high ?? 0) > 0.05) {
    out.push('trainer.loss.eps_low/eps_high: a token-ratio (PPO) range with kind = "gspo", whose sequence ratio moves ~1000x less, ' +
      'so the clip would never act. Fix: remove them (GSPO defaults 3e-4/4e-4) or set values below 0.05');
  }
  // Clips that cannot act: under a decoupled correction the clips bound current / proximal, and with
  // one optimizer update per batch the proximal policy is the current one (ratio 1).
  const t = config.trainer;
  const decoupled = loss.correction === 'tis' || loss.correction === 'icepop';
  if (decoupled && t.minibatches * t.epochs === 1) {
    const inert = (['eps_low', 'eps_high', 'dual_clip'] as const).filter((k) => rawLoss[k] !== undefined && !(k === 'dual_clip' && loss.dual_clip === 0));
    for (const k of inert) {
      out.push(`trainer.loss.${k}: set with correction = "${loss.correction}" and one optimizer update per batch (trainer.minibatches = trainer.epochs = 1), ` +
        'where it cannot act: the clips bound the ratio current / proximal, and in a batch\'s only update the proximal policy is the current one (ratio 1). ' +
        `Fix: remove ${k}, or make several updates per batch (trainer.minibatches or trainer.epochs > 1), ` +
        'or use correction = "mask" or "none" (the clips then bound the ratio against vLLM\'s logprobs)');
    }
  }
  for (const k of ['icepop_low', 'icepop_high'] as const) {
    if (rawLoss[k] !== undefined && loss.correction !== 'icepop') {
      out.push(`trainer.loss.${k}: set with correction = "${loss.correction}", which does not read it. Fix: remove ${k}, or set correction = "icepop"`);
    }
  }
  const trajectories = config.orchestrator.batch_size * config.orchestrator.rollouts_per_example;
  if (t.minibatches > trajectories) {
    out.push(`trainer.minibatches: ${t.minibatches} mini-batches, but a step has at most orchestrator.batch_size x rollouts_per_example = ${trajectories} ` +
      'trajectories, and a mini-batch holds whole trajectories. Fix: lower trainer.minibatches (or raise batch_size)');
  }
  if (config.sampling.temperature === 0) {
    out.push('sampling.temperature: 0 is greedy decoding: a group\'s rollouts are identical and there is no distribution to ' +
      'train on. Fix: a temperature > 0 (1.0 samples the model as it is)');
  }
  return out;
}
