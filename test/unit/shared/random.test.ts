import { mulberry32 } from '../../../src/shared/random';
import { planFaults } from '../../../src/soak/schedule';
import { syntheticEvalResults } from '../../../src/report/synthetic';

describe('mulberry32', () => {
  // Pinned: soaks replay by seed, the report's screenshots and the builder bench depend on these sequences.
  it.each([
    [0, [0.26642920868471265, 0.0003297457005828619, 0.2232720274478197]],
    [7, [0.011704753153026104, 0.06195825757458806, 0.97690763277933]],
    [1234, [0.07329497812315822, 0.7034119898453355, 0.9028560190927237]],
    [2 ** 32 + 5, [0.6897749109193683, 0.7727432732935995, 0.21976301027461886]],
  ])('seed %d', (seed, values) => {
    const r = mulberry32(seed);
    expect([r(), r(), r()]).toEqual(values);
  });

  it('drives the soak schedule and the synthetic report data as before', () => {
    expect(planFaults({ seed: 3, faults: 4, steps: 6 }).map((f) => `${f.step}:${f.kind}@${f.phase}`)).toEqual([
      '1:kill-rollout@weight-sync', '2:hang-trainer@saving', '3:hang-vllm@building-batch', '4:restart-dockerd@rollouts',
    ]);
    expect(syntheticEvalResults('r', [0, 2])[0]!.pass_at).toEqual({ 1: 0.12557935243239626, 4: 0.23860076962155288 });
  });
});
