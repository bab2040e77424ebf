/**
 * Version skew on the rollout side (issue 42, docs/upgrades.md): a step manifest or rollout input that a
 * newer build wrote (a setting this worker does not know) is handed back retryably (ConfigFromNewerBuild)
 * instead of failing the step with a non-retryable error; an invalid value still fails at once; the
 * environment resolver reads only what it needs of a stored config, so a newer run's config resolves.
 * Real chunk/rollout activities and a local store; no rollout runs.
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { runKeys } from '../../../src/artifacts/keys';
import { createChunkActivity } from '../../../src/activities/rolloutChunk';
import { createRolloutActivities } from '../../../src/activities/rollout';
import { createEnvironmentResolver } from '../../../src/activities/environments';
import { StepManifest, rolloutInputOf, type StepManifestInput } from '../../../src/contracts/manifest';
import type { RolloutInput } from '../../../src/contracts/rollout';
import { RunConfig } from '../../../src/config/schema';
import { CONFIG_FROM_NEWER_BUILD } from '../../../src/config/skew';
import { ENVIRONMENTS } from '../../../src/envs/registry';
import type { SandboxManager } from '../../../src/sandbox/interface';

const manifest: StepManifestInput = {
  version: 1, runId: 'skew-run', step: 3, policyVersion: 3, modelName: 'm', taskSetDir: '/fake', seed: 1, rolloutsPerExample: 2,
  tasks: [{ envId: 'swe-grep', envIndex: 0, datasetPath: '/fake/train.jsonl', instanceId: 't0', groupId: 's3-g0' }],
  sampling: { max_tokens: 8 }, envs: [{ args: { max_tokens: 64, max_tool_calls: 3, max_turns: 3 }, rubric: {} }], sandbox: {},
  inferenceBaseUrls: ['http://127.0.0.1:9/v1'], liveness: { heartbeat_every_s: 1, stall_s: 60 },
};
/** The manifest as a build with one more sampling key and one more tool_choice would write it. */
const fromNewer = { ...manifest, sampling: { ...manifest.sampling, tool_choice: 'grammar', speculative_tokens: 4 } };

const store = () => new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-skew-')));

async function chunkError(m: unknown): Promise<unknown> {
  const s = store();
  const ref = await s.putJson(runKeys.stepManifest('skew-run', 3, 'ab'.repeat(32)), m);
  let ran = 0;
  const { rolloutChunk } = createChunkActivity({ store: s, runOne: async () => { ran++; throw new Error('no rollout may run'); } });
  const err = await rolloutChunk({ manifest: ref, start: 0, end: 2 }).then(() => undefined, (e: unknown) => e);
  expect(ran).toBe(0);
  return err;
}

describe('a payload from a newer build is handed back, not failed', () => {
  test('a step manifest with a key and a choice this worker does not know: ConfigFromNewerBuild, retryable, naming both', async () => {
    const f = await chunkError(fromNewer) as ApplicationFailure;
    expect(f).toBeInstanceOf(ApplicationFailure);
    expect(f.type).toBe(CONFIG_FROM_NEWER_BUILD);
    expect(f.nonRetryable).toBe(false);
    expect(f.message).toContain("sampling: unknown key(s) 'speculative_tokens'");
    expect(f.message).toContain("sampling.tool_choice: unknown choice 'grammar'");
    expect(f.message).toContain('Fix:');
  });

  test('an invalid value of a known key is the manifest\'s own fault: not handed back', async () => {
    const err = await chunkError({ ...manifest, sampling: { max_tokens: -1 } });
    expect(err).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(ApplicationFailure);
    expect(String(err)).toContain('max_tokens');
  });

  test('a rollout input from a newer build: ConfigFromNewerBuild, retryable; a malformed one stays InvalidRolloutInput', async () => {
    const { rollout } = createRolloutActivities({ store: store(), sandboxes: {} as SandboxManager });
    const input = rolloutInputOf(StepManifest.parse(manifest), 0);
    const newer = await rollout({ ...input, sampling: { ...input.sampling, speculative_tokens: 4 } } as RolloutInput).then(() => undefined, (e: unknown) => e as ApplicationFailure);
    expect([newer?.type, newer?.nonRetryable]).toEqual([CONFIG_FROM_NEWER_BUILD, false]);
    const bad = await rollout({ ...input, policyVersion: -1 }).then(() => undefined, (e: unknown) => e as ApplicationFailure);
    expect([bad?.type, bad?.nonRetryable]).toEqual(['InvalidRolloutInput', true]);
  });

  test('the environment resolver reads a stored config with sections and keys this build does not know', async () => {
    const s = store();
    const config = RunConfig.parse({ name: 'skew', env: [{ id: 'swe-grep' }] });
    await s.putJson(runKeys.config('newer-run'), { ...config, sampling: { ...config.sampling, speculative_tokens: 4 }, routing: { by: 'cost' } });
    expect(await createEnvironmentResolver(s)('newer-run', 'swe-grep')).toBe(ENVIRONMENTS['swe-grep']);
    // A stored env entry that is malformed still fails loudly.
    await s.putJson(runKeys.config('broken-run'), { ...config, env: [{ id: 'swe-grep', module: 7 }] });
    await expect(createEnvironmentResolver(s)('broken-run', 'swe-grep')).rejects.toMatchObject({ type: 'InvalidRolloutTask' });
  });
});
