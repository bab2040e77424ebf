/**
 * Issue 39, time queued is not time running: a rollout worker's activity slot supplier
 * (src/rollouts/slots.ts) lets a poll take a task only when one of its rollouts can start at once.
 * The supplier is driven here as the Temporal worker drives it (reserve, mark used, release);
 * test/unit/workflows/stepRollouts.test.ts checks it under a real worker and dev server.
 */
import type { ActivitySlotInfo, CustomSlotSupplier, SlotPermit } from '@temporalio/worker';
import { RolloutSlots } from '../../../src/rollouts/slots';

const tick = () => new Promise((r) => setImmediate(r));
const used: ActivitySlotInfo = { type: 'activity', activityType: 'rolloutChunk' };
const ctx = { slotType: 'activity' as const, taskQueue: 'ratchet-rollout', workerIdentity: 'w', workerBuildId: '', isSticky: false };

function supplierOf(slots: RolloutSlots): CustomSlotSupplier<ActivitySlotInfo> {
  return slots.admission().tuner.activityTaskSlotSupplier as unknown as CustomSlotSupplier<ActivitySlotInfo>;
}

/** A poll's reservation, and whether it has a permit yet. */
function reserve(s: CustomSlotSupplier<ActivitySlotInfo>, abort = new AbortController()) {
  const r = { granted: false, permit: undefined as SlotPermit | undefined, error: undefined as unknown, abort };
  s.reserveSlot(ctx, abort.signal).then((p) => { r.granted = true; r.permit = p; }, (e: unknown) => { r.error = e; });
  return r;
}

/** A rollout that runs until `end()`. */
function rollout() {
  let end!: () => void;
  const done = new Promise<void>((r) => { end = r; });
  return { end, fn: () => done };
}

describe("a rollout worker's admission of activities", () => {
  test('a chunk wider than the free slots: the worker takes nothing more until its rollouts stop waiting and a slot is free', async () => {
    const slots = new RolloutSlots(2);
    const s = supplierOf(slots);
    const p1 = reserve(s);
    await tick();
    expect(p1.granted).toBe(true);
    // One poll at a time: a second permit waits, though a slot is free.
    const p2 = reserve(s);
    await tick();
    expect(p2.granted).toBe(false);
    // The first poll brings a chunk of 4 (no cap): 2 run at once, 2 wait for slots.
    s.markSlotUsed({ slotInfo: used, permit: p1.permit! });
    const lease = slots.open(4);
    const rs = [rollout(), rollout(), rollout(), rollout()];
    const started: number[] = [];
    const runs = rs.map((r, i) => lease.run(() => { started.push(i); return r.fn(); }));
    await tick();
    expect(started).toEqual([0, 1]);
    expect(slots.queued).toBe(2);
    expect(p2.granted).toBe(false);
    rs[0]!.end();
    await tick();
    expect(started).toEqual([0, 1, 2]);
    expect(p2.granted).toBe(false); // rollout 3 still waits: the running chunk is served first
    rs[1]!.end();
    await tick();
    expect(started).toEqual([0, 1, 2, 3]);
    expect(p2.granted).toBe(false); // both slots run the chunk's rollouts
    rs[2]!.end();
    await tick();
    expect(p2.granted).toBe(true); // a slot is free and nothing waits: the next chunk can start at once
    rs[3]!.end();
    await Promise.all(runs);
    lease.close();
  });

  test("an admitted chunk's first rollout starts at once, on its own slot, whatever else is running", async () => {
    const slots = new RolloutSlots(2);
    const s = supplierOf(slots);
    const a = reserve(s);
    await tick();
    s.markSlotUsed({ slotInfo: used, permit: a.permit! });
    const la = slots.open(1);
    const ra = rollout();
    const runA = la.run(ra.fn);
    await tick();
    // One slot left: a second chunk is admitted and starts at once.
    const b = reserve(s);
    await tick();
    expect(b.granted).toBe(true);
    s.markSlotUsed({ slotInfo: used, permit: b.permit! });
    const lb = slots.open(2);
    const started: string[] = [];
    const rb = [rollout(), rollout()];
    const runsB = rb.map((r, i) => lb.run(() => { started.push(`b${i}`); return r.fn(); }));
    await tick();
    expect(started).toEqual(['b0']); // its second rollout waits for a slot; its first never does
    ra.end();
    await runA;
    la.close();
    await tick();
    expect(started).toEqual(['b0']); // chunk A still holds its slot until its task is done (its summaries written)
    s.releaseSlot({ slotInfo: used, permit: a.permit! });
    await tick();
    expect(started).toEqual(['b0', 'b1']);
    for (const r of rb) r.end();
    await Promise.all(runsB);
    lb.close();
  });

  test('a chunk-mate waiting on the run\'s cap takes the slot of the rollout that ended: no poll slips in between', async () => {
    const slots = new RolloutSlots(1);
    const s = supplierOf(slots);
    const a = reserve(s);
    await tick();
    s.markSlotUsed({ slotInfo: used, permit: a.permit! });
    const lease = slots.open(1);
    const rs = [rollout(), rollout()];
    const runs = rs.map((r) => lease.run(r.fn));
    const b = reserve(s);
    await tick();
    rs[0]!.end();
    await tick();
    expect(b.granted).toBe(false);
    rs[1]!.end();
    await Promise.all(runs);
    lease.close();
    s.releaseSlot({ slotInfo: used, permit: a.permit! });
    await tick();
    expect(b.granted).toBe(true);
  });

  test('a poll that brought nothing gives its slot back; an aborted reservation rejects with the reason', async () => {
    const slots = new RolloutSlots(1);
    const s = supplierOf(slots);
    const a = reserve(s);
    await tick();
    const b = reserve(s);
    const c = reserve(s);
    await tick();
    expect([b.granted, c.granted]).toEqual([false, false]);
    b.abort.abort(new Error('poller stopped'));
    await tick();
    expect((b.error as Error).message).toBe('poller stopped');
    s.releaseSlot({ permit: a.permit! });
    await tick();
    expect(c.granted).toBe(true);
    expect(b.granted).toBe(false);
  });

  test('without a supplier (tests, the bench), leases still share the slots', async () => {
    const slots = new RolloutSlots(2);
    const l1 = slots.open(2);
    const l2 = slots.open(2);
    let now = 0;
    let peak = 0;
    const one = () => async () => { peak = Math.max(peak, ++now); await tick(); now--; };
    await Promise.all([l1.run(one()), l1.run(one()), l2.run(one()), l2.run(one())]);
    expect(peak).toBe(2);
  });

  test('a size that is not a whole number >= 1 is refused, naming the setting', () => {
    expect(() => new RolloutSlots(0)).toThrow(/RATCHET_ROLLOUT_SLOTS/);
    expect(() => new RolloutSlots(Number('four'))).toThrow(/not a whole number >= 1/);
  });
});
