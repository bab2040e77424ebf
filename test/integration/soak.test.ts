/**
 * The soak's short version (CI): 5 steps with 3 seeded faults on the real stack,
 * then every run invariant, no sandbox and no stray worker left. The long soak
 * (20 steps, 20 faults, a fault-free baseline) is `npm run soak`, out of CI.
 */
import { describeWithStack } from '../helpers/stack';
import { distBuilt } from './trainrunStack';
import { componentLogger } from '../../src/shared/logger';
import { runSoak } from '../../src/soak/run';

describeWithStack('soak (short): a run rides out a seeded fault schedule', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  test('5 steps, 3 faults: completes with every invariant', async () => {
    if (!distBuilt()) throw new Error('dist/workers is missing: run npm run build first');
    // Seed 56: a Temporal restart during rollouts, kill -9 of the workflow worker during trainer.save, a trainer hung mid-step.
    const report = await runSoak({ steps: 5, faults: 3, seed: 56, hangS: 60, baseline: false, logger: componentLogger('soak-test') });
    const injected = report.faults.filter((f) => f.hitAt);
    expect(report.violations).toEqual([]);
    expect(injected.length).toBe(3);
    for (const f of injected) expect(f.recoveryS).toBeGreaterThan(0);
  }, 45 * 60_000);
});
