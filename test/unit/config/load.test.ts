import { ConfigError, parseRunConfig } from '../../../src/config/load';
import { toTrainerConfig } from '../../../src/workflows/trainerConfig';
import { RunConfig, storedRunConfig } from '../../../src/config/schema';

describe('run config', () => {
  test('a minimal config gets every default', () => {
    const c = parseRunConfig('[[env]]\nid = "swe-grep"\n', 'x.toml');
    expect(c.orchestrator.batch_size).toBe(2);
    expect(c.trainer.lora.rank).toBe(8);
    expect(c.env[0]!.args.max_tool_calls).toBe(10);
  });

  test.each([
    ['unknown key', '[[env]]\nid = "swe-grep"\n[orchestrator]\nbatchsize = 4\n', /x\.toml: orchestrator: Unrecognized key\(s\) in object: 'batchsize'/],
    ['wrong type', '[[env]]\nid = "swe-grep"\n[orchestrator]\nbatch_size = "four"\n', /x\.toml: orchestrator\.batch_size: Expected number, received string/],
    ['unknown env', '[[env]]\nid = "chess"\n', /x\.toml: env\.0\.id: unknown environment "chess"/],
    ['no env', '[orchestrator]\nbatch_size = 4\n', /x\.toml: env: Required/],
    ['bad toml', '[[env]\nid = 1', /x\.toml: not valid TOML/],
    ['too much fan-out', '[[env]]\nid = "debug"\n[orchestrator]\nmax_concurrent_rollouts = 70000\n', /max_concurrent_rollouts: Number must be less than or equal to 65536/],
  ])('%s is named with its key', (_name, text, message) => {
    expect(() => parseRunConfig(text, 'x.toml')).toThrow(ConfigError);
    expect(() => parseRunConfig(text, 'x.toml')).toThrow(message);
  });

  const env = '[[env]]\nid = "swe-grep"\n';
  test.each([
    ['dr_grpo with std_normalize', `${env}[orchestrator.advantage]\nkind = "dr_grpo"\nstd_normalize = true\n`, /x\.toml: orchestrator\.advantage\.std_normalize: true with kind = "dr_grpo"/],
    ['dr_grpo with per-sequence normalization', `${env}[orchestrator.advantage]\nkind = "dr_grpo"\n[trainer.loss]\nnormalization = "sequence"\n`, /x\.toml: trainer\.loss\.normalization: "sequence" divides/],
    ['gspo with a token normalization', `${env}[trainer.loss]\nkind = "gspo"\nnormalization = "token"\n`, /x\.toml: trainer\.loss\.normalization: "token" with kind = "gspo"/],
    ['gspo with a PPO clip range', `${env}[trainer.loss]\nkind = "gspo"\neps_low = 0.2\neps_high = 0.28\n`, /x\.toml: trainer\.loss\.eps_low\/eps_high: a token-ratio \(PPO\) range/],
    ['greedy sampling', `${env}[sampling]\ntemperature = 0\n`, /x\.toml: sampling\.temperature: 0 is greedy/],
    ['dual clip at 1', `${env}[trainer.loss]\ndual_clip = 1\n`, /trainer\.loss\.dual_clip: must be 0 \(off\) or > 1/],
    ['a clip range that cannot act (tis, one update)', `${env}[trainer.loss]\neps_high = 0.4\n`, /x\.toml: trainer\.loss\.eps_high: set with correction = "tis" and one optimizer update per batch .* cannot act/],
    ['a dual clip that cannot act (icepop, one update)', `${env}[trainer.loss]\ncorrection = "icepop"\ndual_clip = 5\n`, /x\.toml: trainer\.loss\.dual_clip: set with correction = "icepop" and one optimizer update/],
    ['icepop bounds under tis', `${env}[trainer.loss]\nicepop_high = 3\n`, /x\.toml: trainer\.loss\.icepop_high: set with correction = "tis", which does not read it/],
    ['more mini-batches than trajectories', `${env}[orchestrator]\nbatch_size = 2\nrollouts_per_example = 4\n[trainer]\nminibatches = 9\n`, /x\.toml: trainer\.minibatches: 9 mini-batches, but a step has at most .* = 8/],
  ])('settings that cannot be meant together: %s', (_name, text, message) => {
    expect(() => parseRunConfig(text, 'x.toml')).toThrow(ConfigError);
    expect(() => parseRunConfig(text, 'x.toml')).toThrow(message);
  });

  test.each([
    ['several updates per batch', '[trainer]\nepochs = 2\n[trainer.loss]\neps_high = 0.4\ndual_clip = 5\n'],
    ['a ratio against vLLM\'s logprobs', '[trainer.loss]\ncorrection = "mask"\neps_high = 0.4\n'],
    ['the dual clip turned off', '[trainer.loss]\ndual_clip = 0\n'],
  ])('clip settings where they can act are accepted: %s', (_name, text) => {
    expect(() => parseRunConfig(`${env}${text}`, 'x.toml')).not.toThrow();
  });

  test('updates per batch and icepop bounds pass through to the trainer (one update per batch by default)', () => {
    const plain = toTrainerConfig(parseRunConfig(env, 'x.toml')) as Record<string, unknown> & { loss: Record<string, unknown> };
    expect(plain).toMatchObject({ minibatches: 1, epochs: 1 });
    expect(plain.loss).toMatchObject({ correction: 'tis', icepop_low: 0.5, icepop_high: 2 });
    const c = parseRunConfig(`${env}[trainer]\nminibatches = 2\nepochs = 3\n[trainer.loss]\ncorrection = "icepop"\nicepop_low = 0.25\n`, 'x.toml');
    const t = toTrainerConfig(c) as Record<string, unknown> & { loss: Record<string, unknown> };
    expect(t).toMatchObject({ minibatches: 2, epochs: 3 });
    expect(t.loss).toMatchObject({ correction: 'icepop', icepop_low: 0.25, icepop_high: 2 });
  });

  test('the trainer gets the sampling temperature, the seed, the correction and the loss\'s own clip range', () => {
    const c = parseRunConfig(`${env}[sampling]\ntemperature = 0.7\n[trainer]\nseed = 7\n[trainer.loss]\nkind = "gspo"\n`, 'x.toml');
    const t = toTrainerConfig(c) as { seed: number; loss: Record<string, unknown> };
    expect(t.seed).toBe(7);
    expect(t.loss).toMatchObject({ kind: 'gspo', temperature: 0.7, correction: 'tis', tis_cap: 2, dual_clip: 3 });
    expect(t.loss).not.toHaveProperty('eps_low'); // the trainer's GSPO default (3e-4), not PPO's 0.2
    expect(c.sampling.top_k).toBe(0);
  });
});

describe('[artifacts]: the run chooses its store', () => {
  const env = '[[env]]\nid = "swe-grep"\n';
  test('s3:// with endpoint, region and path style parse; unset means the workers\' default store', () => {
    expect(parseRunConfig(env, 'x.toml').artifacts).toEqual({});
    const c = parseRunConfig(`${env}[artifacts]\nurl = "s3://my-bucket/runs-a"\nendpoint = "http://minio:9000"\nregion = "eu-west-1"\nforce_path_style = true\n`, 'x.toml');
    expect(c.artifacts).toEqual({ url: 's3://my-bucket/runs-a', endpoint: 'http://minio:9000', region: 'eu-west-1', force_path_style: true });
    expect(parseRunConfig(`${env}[artifacts]\nurl = "file:///data/artifacts"\n`, 'x.toml').artifacts.url).toBe('file:///data/artifacts');
  });

  test.each([
    ['url = "http://bucket/x"', /x.toml: artifacts.url: must be "file:\/\/\/absolute\/dir" or "s3:\/\/bucket\/prefix"/],
    ['url = "s3://Bad_Bucket/x"', /artifacts.url: must be/],
    ['url = "file:///a"\nendpoint = "http://minio:9000"', /artifacts.endpoint: only applies to an S3 store/],
    ['url = "s3://b-1/x"\nendpoint = "minio:9000"', /artifacts.endpoint: must be a URL/],
    ['url = "s3://b-1/x"\nroot = "/tmp/a"', /artifacts.root: set url or root, not both/],
    ['url = "s3://b-1/x"\naws_secret_access_key = "s"', /artifacts.aws_secret_access_key: credentials never go in the run config.*Fix: remove it and give every host AWS_ACCESS_KEY_ID/],
    ['url = "s3://b-1/x"\nbucket = "b"', /Unrecognized key.*bucket/],
  ])('%s is refused with the key and the fix', (section, message) => {
    expect(() => parseRunConfig(`${env}[artifacts]\n${section}\n`, 'x.toml')).toThrow(message);
  });
});

test('a step with more rollouts than StepRollouts can hold is refused with the numbers and the fix', () => {
  const env = '[[env]]\nid = "swe-grep"\n';
  // The per-rollout fan-out (rollouts_per_chunk = 0) was removed: 0 is invalid, naming the key and the fix.
  expect(() => parseRunConfig(`${env}[orchestrator]\nrollouts_per_chunk = 0\nbatch_size = 2\n`, 'x.toml'))
    .toThrow(/x.toml: orchestrator.rollouts_per_chunk: must be 1-64; 0 \(one activity per rollout, tasks inline\) was the pre-0.6 fan-out, removed in 0.8.*Fix: remove the key/);
  expect(() => RunConfig.parse({ env: [{ id: 'swe-grep' }], orchestrator: { rollouts_per_chunk: 0 } })).toThrow(/removed in 0.8/);
  // A config a 0.6/0.7 run stored with 0 reads as the default: restarted on this build, the run goes on in chunks.
  expect(storedRunConfig({ env: [{ id: 'swe-grep' }], orchestrator: { rollouts_per_chunk: 0, batch_size: 3 } }).orchestrator)
    .toMatchObject({ rollouts_per_chunk: 16, batch_size: 3 });
  // In chunks over shards, the same step (and a 65,536-rollout one) fits.
  expect(parseRunConfig(`${env}[orchestrator]\nbatch_size = 1001\nrollouts_per_example = 10\n`, 'x.toml').orchestrator.rollouts_per_chunk).toBe(16);
  expect(parseRunConfig(`${env}[orchestrator]\nbatch_size = 8192\nrollouts_per_example = 8\nmax_concurrent_rollouts = 16384\n`, 'x.toml').orchestrator.batch_size).toBe(8192);
});

test.each([
  ['rollouts_per_chunk = 65', /orchestrator.rollouts_per_chunk/],
  ['batch_size = 10000\nrollouts_per_example = 1024\nrollouts_per_chunk = 1\nchunks_per_shard = 1', /orchestrator.chunks_per_shard: .* shard children, over the 500 one StepRollouts keeps in flight/],
  ['rollouts_per_chunk = 1\nchunks_per_shard = 1000\nmax_concurrent_rollouts = 1000\nbatch_size = 500\nrollouts_per_example = 2', /orchestrator.max_concurrent_rollouts: 1000 rollouts in flight in chunks of 1 over 1 shard\(s\) put 1000 chunk activities in flight in one execution, over Temporal's ~500/],
  ['chunks_per_shard = 1001', /orchestrator.chunks_per_shard/],
])('a fan-out past Temporal\'s limits (%s) is a config error naming the key and the limit', (section, message) => {
  expect(() => parseRunConfig(`[[env]]\nid = "swe-grep"\n[orchestrator]\n${section}\n`, 'x.toml')).toThrow(message);
});
