import { existsSync } from 'node:fs';
import { checkEnvironments, harnessProblem } from '../../../src/check/data';
import { loadRunConfig } from '../../../src/config/load';
import { miniSweAgent, nano } from '../../../src/envs/harnesses';
import { harnessSpecFor } from '../../../src/harness/run';

describe('harness run configs', () => {
  test.each(['configs/nano/smoke.toml', 'configs/mini-swe-agent/smoke.toml'])('%s loads; its environment is an external harness', async (file) => {
    const { config } = await loadRunConfig(file);
    const { envs, lines } = checkEnvironments(config);
    const env = envs[0]!;
    expect(env.harness).toBeDefined();
    const installed = existsSync(env.harness!.command[0]!);
    expect(lines[0]!.level).toBe(installed && process.getuid?.() === 0 ? 'ok' : 'fail');
    const spec = harnessSpecFor(env.harness!, config.env[0]!.args);
    expect(spec.timeout_s).toBe(600);
  });

  test('harnessProblem names the missing venv with its fix; env args override the time limit and merge args', () => {
    expect(harnessProblem({ ...nano.harness!, command: ['/nope/python'] }, true)).toMatch(/\/nope\/python is not installed. Fix: bash infra\/harness-env.sh/);
    expect(harnessSpecFor({ ...miniSweAgent.harness!, args: { a: 1 } }, { harness_timeout_s: 30, harness_args: { b: 2 } })).toMatchObject({ timeout_s: 30, args: { a: 1, b: 2 } });
    expect(harnessSpecFor(nano.harness!, { harness_timeout_s: -1 }).timeout_s).toBe(900);
  });
});
