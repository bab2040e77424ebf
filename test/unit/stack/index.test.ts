/**
 * The local stack's worker processes (src/stack/index.ts): the rollout worker's slots.
 */
import { workerSpecs } from '../../../src/stack';
import { RolloutSlots } from '../../../src/rollouts/slots';

const rolloutEnv = () => workerSpecs(undefined).find((s) => s.name === 'worker-rollout')!.env!;

describe('the local rollout worker', () => {
  const saved = process.env.RATCHET_ROLLOUT_SLOTS;
  afterEach(() => {
    if (saved === undefined) delete process.env.RATCHET_ROLLOUT_SLOTS;
    else process.env.RATCHET_ROLLOUT_SLOTS = saved;
  });

  test('keeps 8 rollouts in flight unless RATCHET_ROLLOUT_SLOTS says otherwise, a size the worker accepts', () => {
    delete process.env.RATCHET_ROLLOUT_SLOTS;
    expect(rolloutEnv().RATCHET_ROLLOUT_SLOTS).toBe('8');
    // The worker reads it as src/workers/rollout.ts does.
    expect(new RolloutSlots(Number(rolloutEnv().RATCHET_ROLLOUT_SLOTS)).size).toBe(8);
    process.env.RATCHET_ROLLOUT_SLOTS = '3';
    expect(rolloutEnv().RATCHET_ROLLOUT_SLOTS).toBe('3');
  });
});
