/** `ratchet restart`: which runs may restart, and from where. */
import { restartPlan } from '../../src/cli/restart';
import { CliError, EXIT } from '../../src/cli/exit';
import { buildProgram } from '../../src/cli';
import type { RunStateFile } from '../../src/contracts';
import { ref } from './workflowFakes';

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
});
