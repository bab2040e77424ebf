/**
 * The cost ledger and budgets (issue 30; docs/operations.md, "What a run costs and budgets") on a real
 * dev server with fake activities: each step record's cost adds up its rollouts' sandboxes and tokens
 * and the trainer's seconds, run_cost is the running sum (also across continue-as-new), a run whose
 * cost reaches a budget waits with status budget-exhausted, `set --budget` with a bad value is refused,
 * and raising the budget lets the run go on.
 */
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { describeWithStack } from '../../helpers/stack';
import { SA, controlUpdates, progressQuery, setSettingsUpdate } from '../../../src/workflows/messages';
import type { TrainRun } from '../../../src/workflows/trainRun';
import { makeFakes } from '../../helpers/workflowFakes';
import { useFakeWorld, withFakeWorkers } from '../../helpers/fakeWorld';
import { recordHistory } from '../../helpers/histories';

jest.setTimeout(150_000);

describeWithStack('TrainRun cost ledger and budgets (fake activities, real dev server)', ['temporalBinary'], () => {
  const world = useFakeWorld();

  test('a budget reached pauses the run as budget-exhausted; a bad raise is refused; a raise resumes it; costs add up', async () => {
    const sandboxCost = { containers: 2, container_s: 1.25, cpu_s: 0.5 };
    const trainerCost = { cpu_s: 3, gpu_s: 0 };
    // 2 tasks x 3 rollouts a step, 10 completion tokens each: 60 tokens generated a step. The budget of 100
    // is reached after step 1 (120), so the run waits before step 2.
    const f = makeFakes({ orchestrator: { max_steps: 3, async_level: 0 }, budget: { max_tokens_generated: 100 }, sandboxCost, trainerCost });
    await withFakeWorkers(world, f, {}, async () => {
      const runId = `budget-${process.pid}`;
      // continueAsNewEvery 1: the run's cost is carried across continue-as-new.
      const handle = await world.env.client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId, continueAsNewEvery: 1 }],
      });
      await until(async () => (await handle.query(progressQuery)).status === 'budget-exhausted');
      const p = await handle.query(progressQuery);
      expect(p.step).toBe(2);
      expect(p.budgetExhausted).toEqual({ key: 'tokens_generated', spent: 120, budget: 100 });
      expect(p.cost?.tokens_generated).toBe(120);
      expect(f.records).toHaveLength(2);
      const desc = await handle.describe();
      expect(desc.typedSearchAttributes.get(SA.status)).toBe('budget-exhausted');
      // Nothing of step 2 started while it waits.
      await new Promise((r) => setTimeout(r, 1500));
      expect(f.events.some((e) => e.what === 'rollout-start' && e.step === 2)).toBe(false);

      // resume does not lift a budget; a bad budget is refused by the validator, with the fix.
      const refused = async (name: string, args: Record<string, unknown>) => {
        try {
          await handle.executeUpdate<string, [Record<string, unknown>]>(name, { args: [args] });
        } catch (err) {
          expect(err).toBeInstanceOf(WorkflowUpdateFailedError);
          return ((err as WorkflowUpdateFailedError).cause as Error).message;
        }
        throw new Error('accepted');
      };
      expect(await refused(controlUpdates.resume.name, { reason: 'go on' })).toMatch(/budget-exhausted \(tokens_generated 120 of 100\).*ratchet set .* --budget tokens_generated=/);
      expect(await refused(setSettingsUpdate.name, { budget: { tokens_generated: -5 }, reason: 'x' })).toMatch(/budget tokens_generated must be a number above 0 \(got -5\)/);
      expect(await refused(setSettingsUpdate.name, { budget: { dollars: 5 }, reason: 'x' })).toMatch(/unknown figure dollars/);
      expect((await handle.query(progressQuery)).status).toBe('budget-exhausted');

      await handle.executeUpdate(setSettingsUpdate, { args: [{ budget: { tokens_generated: 1000 }, reason: 'approved', identity: 'alice@h' }] });
      const result = await handle.result();
      expect(result.stepsCompleted).toBe(3);
      expect(f.records).toHaveLength(3);

      // Each step's cost, from what its activities reported (computed here independently).
      const perRollout = 6;
      for (const [i, { record, state }] of f.records.entries()) {
        expect(record.cost).toMatchObject({
          sandbox_containers: perRollout * sandboxCost.containers,
          sandbox_container_s: perRollout * sandboxCost.container_s,
          sandbox_cpu_s: perRollout * sandboxCost.cpu_s,
          trainer_cpu_s: trainerCost.cpu_s,
          trainer_gpu_s: 0,
          tokens_generated: perRollout * 10,
          tokens_trained: 7 * perRollout,
        });
        expect(record.cost!.temporal_events).toBeGreaterThan(0);
        // StepRollouts ran 6 rollout activities at least: 3 events each (scheduled, started, completed).
        expect(record.cost!.temporal_child_events).toBeGreaterThan(3 * perRollout);
        // run_cost: the sum of the records so far; the state file carries it.
        const sum = f.records.slice(0, i + 1).reduce((a, r) => a + r.record.cost!.sandbox_container_s, 0);
        expect(record.run_cost!.sandbox_container_s).toBeCloseTo(sum, 6);
        expect(record.run_cost!.tokens_generated).toBe((i + 1) * 60);
        expect(state.cost).toEqual(record.run_cost);
      }
      // The raise is audited like every control, and in effect from then on.
      const set = f.records[2]!.record.control!.find((c) => c.action === 'set')!;
      expect([set.identity, set.reason, set.changes]).toEqual(['alice@h', 'approved', { budget: { tokens_generated: 1000 } }]);
      expect(f.records[2]!.record.overrides).toEqual({ budget: { tokens_generated: 1000 } });
      await recordHistory(world.env.client.workflow.getHandle(runId), 'trainrun-budget-exhausted');
    });
  });
});

async function until(check: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 100));
  }
}
