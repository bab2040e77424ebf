/**
 * Lineage from 0.7 (issue 30), the rollout side: the rollout worker names the sandbox image it ran
 * (docker image inspect, cached per name) and the environment's version and source sha256 in each
 * summary and trajectory; the step's lineage lists the distinct values; `ratchet lineage` prints them.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import Docker from 'dockerode';
import { z } from 'zod';
import { createRolloutActivities } from '../../../src/activities/rollout';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { lineageText } from '../../../src/cli/lineage';
import { RunConfig } from '../../../src/config/schema';
import { StepLineage } from '../../../src/contracts/records';
import type { RolloutInput } from '../../../src/contracts/rollout';
import { RolloutSummary, Trajectory } from '../../../src/contracts/trajectory';
import { computeEnvProvenance, envProvenance } from '../../../src/envs/provenance';
import { EnvironmentError, validateEnvironment } from '../../../src/envs/load';
import type { AcquireOptions } from '../../../src/sandbox/interface';
import { rolloutStats } from '../../../src/rollouts/stats';
import { createImageDigests, type ImageInspector } from '../../../src/sandbox/imageDigest';
import { SandboxManager } from '../../../src/sandbox/manager';
import { REPO_ROOT } from '../../../src/shared/paths';
import { stepLineage } from '../../../src/workflows/lineage';
import { CALC_FILES, call, FakeSandboxManager, ScriptedModel } from '../../helpers/rolloutFakes';

jest.setTimeout(30_000);

/** The expected sha256, computed apart from src/envs/provenance.ts: one buffer of (u64 len, path, u64 len, bytes) per file. */
function expectedSha(root: string, rels: string[]): string {
  const u64 = (n: number) => Buffer.from(n.toString(16).padStart(16, '0'), 'hex');
  const parts = [...rels].sort().flatMap((rel) => {
    const data = readFileSync(path.join(root, rel));
    return [u64(Buffer.byteLength(rel)), Buffer.from(rel), u64(data.length), data];
  });
  return createHash('sha256').update(Buffer.concat(parts)).digest('hex');
}

function tree(files: Record<string, string>): string {
  const root = mkdtempSync(path.join(os.tmpdir(), 'ratchet-envprov-'));
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(root, rel)), { recursive: true });
    writeFileSync(path.join(root, rel), text);
  }
  return root;
}

describe('environment provenance', () => {
  test('a packaged module: its package version and a sha256 over its sources, node_modules and non-sources left out', () => {
    const repo = tree({ 'package.json': '{"version":"9.9.9"}' });
    const pkg = tree({
      'package.json': '{"name":"my-env","version":"1.2.3"}', 'index.js': 'module.exports = {}', 'lib/util.ts': 'export {}',
      'README.md': 'not a source', 'node_modules/dep/index.js': 'x',
    });
    try {
      const env = { id: 'my-env', origin: path.join(pkg, 'index.js') };
      const p = computeEnvProvenance(env, repo);
      expect(p).toEqual({ id: 'my-env', version: '1.2.3', sha256: expectedSha(pkg, ['index.js', 'lib/util.ts', 'package.json']) });
      // A declared version wins; the readme and node_modules do not count; a source does.
      expect(computeEnvProvenance({ ...env, version: '2024.1' }, repo).version).toBe('2024.1');
      writeFileSync(path.join(pkg, 'README.md'), 'changed');
      writeFileSync(path.join(pkg, 'node_modules/dep/index.js'), 'changed');
      expect(computeEnvProvenance(env, repo).sha256).toBe(p.sha256);
      writeFileSync(path.join(pkg, 'lib/util.ts'), 'export const x = 1;');
      expect(computeEnvProvenance(env, repo).sha256).not.toBe(p.sha256);
    } finally {
      rmSync(repo, { recursive: true, force: true });
      rmSync(pkg, { recursive: true, force: true });
    }
  });

  test('a module file in the repository without a package: its folder, or the file alone at the root; version unknown', () => {
    const repo = tree({ 'package.json': '{"version":"9.9.9"}', 'root-env.js': 'a', 'other.js': 'b', 'envs/mine/index.js': 'c', 'envs/mine/tools.js': 'd' });
    try {
      expect(computeEnvProvenance({ id: 'mine', origin: path.join(repo, 'envs/mine/index.js') }, repo))
        .toEqual({ id: 'mine', version: 'unknown', sha256: expectedSha(path.join(repo, 'envs/mine'), ['index.js', 'tools.js']) });
      expect(computeEnvProvenance({ id: 'r', origin: path.join(repo, 'root-env.js') }, repo).sha256).toBe(expectedSha(repo, ['root-env.js']));
    } finally {
      rmSync(repo, { recursive: true, force: true });
    }
  });

  test('a built-in: Ratchet\'s version and the sources of its folder under src/envs', () => {
    const dir = path.join(REPO_ROOT, 'src', 'envs', 'swe-grep');
    const walk = (d: string): string[] => readdirSync(d).flatMap((n) => statSync(path.join(d, n)).isDirectory() ? walk(path.join(d, n)) : [path.join(d, n)]);
    const rels = walk(dir).map((f) => path.relative(dir, f)).filter((f) => /\.(js|ts|json)$/.test(f));
    expect(rels.length).toBeGreaterThan(0);
    const version = (JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
    expect(envProvenance({ id: 'swe-grep' })).toEqual({ id: 'swe-grep', version, sha256: expectedSha(dir, rels) });
  });

  test('a module\'s `version` export is kept; one that is not a string is named as the problem', () => {
    const base = {
      systemPrompt: 's', userPrompt: () => 'u', rubric: [{ name: 'r', weight: 1, fn: () => 0 }],
      tools: [{ name: 't', description: 'd', args: z.object({}), run: async () => '' }],
    };
    expect(validateEnvironment({ ...base, version: '2.0.1' }, './m.js', 'm').version).toBe('2.0.1');
    expect(validateEnvironment(base, './m.js', 'm')).not.toHaveProperty('version');
    expect(() => validateEnvironment({ ...base, version: 3 }, './m.js', 'm')).toThrow(EnvironmentError);
    expect(() => validateEnvironment({ ...base, version: 3 }, './m.js', 'm')).toThrow(/`version` must be a non-empty string/);
  });
});

describe('sandbox image digests', () => {
  const fakeDocker = (images: Record<string, { Id?: string; RepoDigests?: string[] }>) => {
    const calls: string[] = [];
    const docker = {
      getImage: (name: string) => ({
        inspect: async () => {
          calls.push(name);
          const info = images[name];
          if (!info) throw Object.assign(new Error(`(HTTP code 404) no such image - ${name}`), { statusCode: 404 });
          return info;
        },
      }),
    } as unknown as ImageInspector;
    return { docker, calls };
  };

  test('inspected once per image name (cached); repo digests sorted; a failure is not cached', async () => {
    const images: Record<string, { Id?: string; RepoDigests?: string[] }> = { 'a:1': { Id: 'sha256:aaa', RepoDigests: ['r/a@sha256:2', 'q/a@sha256:1'] }, 'b:1': { Id: 'sha256:bbb' } };
    const { docker, calls } = fakeDocker(images);
    const digestOf = createImageDigests(docker);
    expect(await digestOf('a:1')).toEqual({ name: 'a:1', id: 'sha256:aaa', repo_digests: ['q/a@sha256:1', 'r/a@sha256:2'] });
    await digestOf('a:1');
    expect(await digestOf('b:1')).toEqual({ name: 'b:1', id: 'sha256:bbb', repo_digests: [] });
    expect(calls).toEqual(['a:1', 'b:1']);
    await expect(digestOf('c:1')).rejects.toThrow(/no such image/);
    images['c:1'] = { Id: 'sha256:ccc' };
    expect((await digestOf('c:1')).id).toBe('sha256:ccc');
  });

  test('the manager inspects the image acquire would run: the task\'s, else [sandbox].image, else its default', async () => {
    const { docker, calls } = fakeDocker({ 'task:1': { Id: 'sha256:t' }, 'cfg:1': { Id: 'sha256:c' }, 'default:1': { Id: 'sha256:d' } });
    const m = new SandboxManager({ docker: docker as unknown as Docker, image: 'default:1', workerId: 'w' });
    const limits = RunConfig.parse({ name: 'x', env: [{ id: 'swe-grep' }] }).sandbox;
    expect((await m.imageDigest({ image: 'task:1', limits: { ...limits, image: 'cfg:1' } })).id).toBe('sha256:t');
    expect((await m.imageDigest({ limits: { ...limits, image: 'cfg:1' } })).id).toBe('sha256:c');
    expect((await m.imageDigest({ limits })).id).toBe('sha256:d');
    expect(calls).toEqual(['task:1', 'cfg:1', 'default:1']);
  });

  // Against this host's dockerd, when it has the sandbox image (bash infra/docker.sh setup builds it).
  const image = 'ratchet-sandbox:latest';
  let cliId: string | undefined;
  try {
    cliId = execFileSync('docker', ['image', 'inspect', '--format', '{{.Id}}', image], { encoding: 'utf8', timeout: 20_000 }).trim();
  } catch { /* no docker or no image */ }
  if (!cliId) console.warn(`SKIPPING the real image digest test: \`docker image inspect ${image}\` failed. Fix: bash infra/docker.sh setup`);
  (cliId ? test : test.skip)(`the id of ${image} is what \`docker image inspect --format '{{.Id}}'\` prints`, async () => {
    expect((await createImageDigests(new Docker())(image)).id).toBe(cliId);
  });
});

describe('rollout summaries carry the provenance; the step lineage lists the distinct values', () => {
  const task = {
    instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1', patch: '',
    FAIL_TO_PASS: [], PASS_TO_PASS: [], gold_files: ['pkg/calc.py'], test_cmd: 'python3 -m pytest', source: { type: 'snapshot' as const, repo_path: 'repos/calc.git' },
  };
  const input: RolloutInput = {
    runId: 'run1', step: 2, groupId: 'g0', rolloutIndex: 1, envId: 'swe-grep', task, taskSetDir: '/tasks',
    policyVersion: 1, modelName: 'policy-v1', sampling: { temperature: 1, top_p: 1, max_tokens: 64 },
    envArgs: { max_tokens: 500, max_tool_calls: 5, max_turns: 4 }, rubric: {},
    sandbox: { memory_mb: 512, cpus: 1, pids_limit: 128, disk_mb: 256, exec_timeout_s: 30, output_limit_bytes: 16384, warm_pool_size: 0, image: 'img:7' },
    inferenceBaseUrl: 'http://127.0.0.1:8000/v1', seed: 7,
  };

  test('the rollout activity puts the image (as the manager resolves it) and the env in the summary and the trajectory', async () => {
    class WithDigests extends FakeSandboxManager {
      asked: Pick<AcquireOptions, 'image' | 'limits'>[] = [];
      async imageDigest(opts: Pick<AcquireOptions, 'image' | 'limits'>) {
        this.asked.push(opts);
        return { name: opts.image ?? opts.limits.image!, id: 'sha256:feed', repo_digests: [] };
      }
    }
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
    const sandboxes = new WithDigests(CALC_FILES);
    const model = new ScriptedModel([{ tool_calls: [call('result', { files: ['pkg/calc.py'], functions: ['add'] })] }]);
    const acts = createRolloutActivities({ store, sandboxes, openaiFactory: () => model });
    const summary = RolloutSummary.parse(await new MockActivityEnvironment().run(acts.rollout, input));
    expect(summary.stop_reason).toBe('completed');
    const env = envProvenance({ id: 'swe-grep' });
    expect(summary.provenance).toEqual({ image: { name: 'img:7', id: 'sha256:feed', repo_digests: [] }, env });
    expect(sandboxes.asked[0]!.limits.image).toBe('img:7');
    expect(Trajectory.parse(await store.getJson(summary.trajectory)).provenance).toEqual(summary.provenance);
    // A manager that cannot inspect (a test fake) leaves the image out, never the rollout.
    const fresh = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
    const plain = createRolloutActivities({ store: fresh, sandboxes: new FakeSandboxManager(CALC_FILES), openaiFactory: () => new ScriptedModel([{ content: 'x' }]) });
    expect(RolloutSummary.parse(await new MockActivityEnvironment().run(plain.rollout, input)).provenance).toEqual({ env });
  });

  const summary = (i: number, provenance?: RolloutSummary['provenance']): RolloutSummary => ({
    task_id: `t${i}`, group_id: 'g', rollout_index: i, trajectory: { uri: `file:///t${i}`, sha256: 'x', bytes: 1 }, reward: 1, components: {},
    stop_reason: 'completed', policy_version: 3, completion_tokens: 1, tool_calls: 0, model_ms: 0, tools_ms: 0, sandbox_ms: 0,
    ...(provenance ? { provenance } : {}),
  });
  const envA = { id: 'swe-grep', version: '0.6.0', sha256: 'a'.repeat(64) };
  const envB = { id: 'mine', version: '1.0.0', sha256: 'b'.repeat(64) };
  const img = (id: string) => ({ name: 'n', id, repo_digests: [] });

  test('two rollouts with two image digests: both listed (sorted, once each); envs distinct; old summaries add nothing', () => {
    const stats = rolloutStats([
      summary(0, { image: img('sha256:22'), env: envA }),
      summary(1, { image: img('sha256:11'), env: envB }),
      summary(2, { image: img('sha256:22'), env: envA }),
      summary(3), // a summary from before 0.7
    ], 3);
    expect(stats.sandboxImageDigests).toEqual(['sha256:11', 'sha256:22']);
    expect(stats.envModules).toEqual([envB, envA]); // sorted by id
    const old = rolloutStats([summary(0), summary(1)], 3);
    expect(old).not.toHaveProperty('sandboxImageDigests');
    expect(old).not.toHaveProperty('envModules');

    const config = RunConfig.parse({ name: 'x', env: [{ id: 'swe-grep' }] });
    const base = { config, configSha256: 'c', seed: 1, step: 2, taskSetDir: '/t', tasks: 4, versionBefore: 3, trained: false };
    const l = StepLineage.parse(stepLineage({ ...base, sandboxImageDigests: stats.sandboxImageDigests, envModules: stats.envModules }));
    expect(l.sandbox_image_digests).toEqual(['sha256:11', 'sha256:22']);
    expect(l.env_modules).toEqual([envB, envA]);
    const text = lineageText(2, l);
    expect(text).toMatch(/sandbox image id\[0\]\s+sha256:11\n/);
    expect(text).toMatch(/sandbox image id\[1\]\s+sha256:22\n/);
    expect(text).toMatch(new RegExp(`env module\\[mine\\]\\s+version 1\\.0\\.0, sources sha256 ${'b'.repeat(64)}\\n`));
    expect(text).toMatch(new RegExp(`env module\\[swe-grep\\]\\s+version 0\\.6\\.0, sources sha256 ${'a'.repeat(64)}\\n`));
    // A lineage from before 0.7 parses and says so.
    const before = StepLineage.parse(stepLineage({ ...base, sandboxImageDigests: old.sandboxImageDigests, envModules: old.envModules }));
    expect(before).not.toHaveProperty('sandbox_image_digests');
    expect(lineageText(2, before)).toMatch(/sandbox image id\s+\(not reported/);
    expect(lineageText(2, before)).toMatch(/env modules\s+\(not reported/);
  });
});
