/** `ratchet restart`: which runs may restart, and from where. */
import { readRunState, restartPlan } from '../../../src/cli/restart';
import { runKeys } from '../../../src/artifacts/keys';
import type { ArtifactStore } from '../../../src/artifacts/store';
import { CliError, EXIT } from '../../../src/cli/exit';
import { buildProgram } from '../../../src/cli';
import type { RunStateFile } from '../../../src/contracts';
import { ref } from '../../helpers/workflowFakes';

const state: RunStateFile = {
  format: 'ratchet.run-state/v1', runId: 'r1', configSha256: 'x', completedStep: 4, nextStep: 5, policyVersion: 5,
  configRef: { ...ref('config'), uri: 'file:///art/runs/r1/config.json' }, seed: 0,
};

function codeOf(fn: () => unknown): [number, string] {
  try {
    fn();
  } catch (err) {
    if (err instanceof CliError) return [err.code, err.message];
    throw err;
  }
  return [0, 'no error'];
}

describe('ratchet restart', () => {
  it('is a command', () => {
    expect(buildProgram().commands.map((c) => c.name())).toContain('restart');
  });

  it.each(['FAILED', 'TERMINATED', 'CANCELLED', 'TIMED_OUT'])('restarts a %s run from its last completed step, same run id', (status) => {
    const plan = restartPlan('r1', status, state, undefined);
    expect(plan.input).toEqual({ configPath: '/art/runs/r1/config.json', runId: 'r1' });
    expect(plan.from).toBe('step 5 (policy v5)');
  });

  it('refuses a running or completed run, saying what to do', () => {
    expect(codeOf(() => restartPlan('r1', 'RUNNING', state, undefined))).toEqual([EXIT.failure, expect.stringMatching(/is running.*ratchet status r1/)]);
    expect(codeOf(() => restartPlan('r1', 'COMPLETED', state, undefined))).toEqual([EXIT.failure, expect.stringMatching(/is completed, not failed or terminated/)]);
  });

  it('a run that never completed a step needs its config, and then starts from step 0', () => {
    expect(codeOf(() => restartPlan('r1', 'FAILED', undefined, undefined))).toEqual([EXIT.notReady, expect.stringMatching(/--config <its config>/)]);
    expect(restartPlan('r1', 'FAILED', undefined, 'configs/a.toml')).toEqual({ input: { configPath: 'configs/a.toml', runId: 'r1' }, from: 'step 0' });
  });

  describe('a run in a store of its own (hole 9: an S3 run was told it "never completed a step")', () => {
    const settings = { url: 's3://ratchet-runs/prod', endpoint: 'http://minio:9000' };
    const s3State: RunStateFile = { ...state, configRef: { ...ref('config'), uri: 's3://ratchet-runs/prod/runs/r1/config.json' } };
    /** The run's S3 store, faked: it holds the state file; the local store does not. */
    const fakeStore = (files: Record<string, unknown>) => ({
      url: 's3://ratchet-runs/prod',
      read: async (key: string) => (key in files ? Buffer.from(JSON.stringify(files[key])) : undefined),
      list: async (prefix: string) => Object.keys(files).filter((k) => k.startsWith(prefix)),
    }) as unknown as ArtifactStore;

    it('reads the state from the run\'s store and resumes from it, with the store\'s settings', async () => {
      const read = await readRunState('r1', fakeStore({ [runKeys.state('r1')]: s3State }));
      expect(read).toEqual(s3State);
      const plan = restartPlan('r1', 'FAILED', read, undefined, settings);
      expect(plan.from).toBe('step 5 (policy v5)');
      expect(plan.input).toMatchObject({
        runId: 'r1', configPath: 's3://ratchet-runs/prod/runs/r1/config.json',
        resume: { nextStep: 5, policyVersion: 5, configRef: s3State.configRef, artifacts: settings },
      });
    });

    it('a run with no state in its store never completed a step', async () => {
      expect(await readRunState('r1', fakeStore({}))).toBeUndefined();
      expect(codeOf(() => restartPlan('r1', 'FAILED', undefined, undefined, settings))).toEqual([EXIT.notReady, expect.stringMatching(/never completed a step/)]);
    });

    it('an s3:// config ref without the run\'s settings is not read as a local path', () => {
      // What the old code did with an S3 run's state: uriToPath threw on the s3:// uri.
      expect(() => restartPlan('r1', 'FAILED', s3State, undefined)).toThrow(/not a file:\/\/ uri/);
    });
  });
});
