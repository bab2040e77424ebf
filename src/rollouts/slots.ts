/**
 * A rollout worker's slots, counted in rollouts, and the admission of activities to them
 * (issue 39: time queued is not time running).
 *
 * The worker takes an activity (a chunk, or one rollout) from the task queue only when it can
 * start one of its rollouts at once: the Temporal worker's activity slot supplier is `admission()`,
 * so a chunk that cannot start stays in the queue, where its schedule-to-start grows and another
 * worker may take it, instead of waiting for a slot inside this worker under its start-to-close.
 *
 * Each admitted activity owns one slot (its seat) from admission to its end: its first rollout runs
 * on it at once. Its other rollouts take free slots; when none is free they wait, first come first
 * served, and while any waits the worker takes no new activity (a running chunk is served before a
 * new one). The run's cap inside a chunk (orchestrator.max_concurrent_rollouts) is the lease's: a
 * chunk-mate waiting on it gets the slot of the rollout that ended, so no other activity slips in.
 * At most one permit waits on a poll at a time: an idle permit holds a slot, and a chunk admitted
 * meanwhile must not find its rollouts shut out by polls that may bring nothing.
 */
import type { ActivitySlotInfo, CustomSlotSupplier, SlotPermit, SlotReleaseContext, TunerHolder } from '@temporalio/worker';

interface Waiter { lease: SlotLease; go: () => void }

export class RolloutSlots {
  private readonly leases = new Set<SlotLease>();
  /** Rollouts running beyond each activity's first (on its seat). */
  private extras = 0;
  /** Rollouts of admitted activities waiting for a free slot, first come first served. */
  private readonly waiting: Waiter[] = [];
  private readonly admissions = new Set<Admission>();
  private soon: NodeJS.Immediate | undefined;

  constructor(readonly size: number) {
    if (!(size === Infinity || (Number.isInteger(size) && size >= 1))) {
      throw new Error(`rollout slots: ${size} is not a whole number >= 1. Fix: set RATCHET_ROLLOUT_SLOTS to the rollouts this host can run at once`);
    }
  }

  /** One rollout on its own lease (the per-rollout `rollout` activity). */
  async run<T>(fn: () => Promise<T>): Promise<T> {
    const lease = this.open(1);
    try {
      return await lease.run(fn);
    } finally {
      lease.close();
    }
  }

  /** An activity's share of the slots; `cap` bounds its rollouts at once. Close it when the activity ends. */
  open(cap = Infinity): SlotLease {
    const lease = new SlotLease(this, Math.max(1, cap));
    this.leases.add(lease);
    return lease;
  }

  /**
   * The activity slot supplier of one Temporal worker (its `tuner`), and `close` for when that worker
   * has stopped (a host out of service stops its worker and later starts another on the same slots).
   */
  admission(): { tuner: TunerHolder; close: () => void } {
    const a = new Admission(this);
    this.admissions.add(a);
    return {
      tuner: {
        activityTaskSlotSupplier: a,
        // A rollout worker runs no workflows, local activities or Nexus tasks.
        workflowTaskSlotSupplier: { type: 'fixed-size', numSlots: 2 },
        localActivityTaskSlotSupplier: { type: 'fixed-size', numSlots: 1 },
        nexusTaskSlotSupplier: { type: 'fixed-size', numSlots: 1 },
      },
      close: () => {
        this.admissions.delete(a);
        a.closeAll();
        this.dispatch();
      },
    };
  }

  /** Slots held: seats of admitted activities (or open leases, without a supplier), idle permits, extras. */
  held(): number {
    let idle = 0;
    let active = 0;
    for (const a of this.admissions) {
      idle += a.idle;
      active += a.active;
    }
    return idle + Math.max(active, this.leases.size) + this.extras;
  }

  /** Rollouts of admitted activities waiting for a slot. */
  get queued(): number { return this.waiting.length; }

  private starting(): number {
    let n = 0;
    for (const a of this.admissions) n += a.starting;
    return n;
  }

  private idle(): number {
    let n = 0;
    for (const a of this.admissions) n += a.idle;
    return n;
  }

  /** A new activity may be polled for: a slot is free, no admitted rollout waits, every admitted activity has asked, no poll holds a permit. */
  canAdmit(): boolean {
    return this.waiting.length === 0 && this.starting() === 0 && this.idle() === 0 && this.held() < this.size;
  }

  /** @internal A lease's rollout asks for a slot beyond its seat: granted now (true), or queued. */
  acquireExtra(lease: SlotLease, go: () => void): boolean {
    if (this.waiting.length === 0 && this.held() < this.size) {
      this.extras++;
      return true;
    }
    this.waiting.push({ lease, go });
    return false;
  }

  /** @internal A lease's rollout ended and no chunk-mate took its slot over. */
  released(wasExtra: boolean): void {
    if (wasExtra) this.extras--;
    this.dispatch();
  }

  /** @internal An admitted activity asked for its rollouts (or ended): new ones may be admitted after this tick's asks. */
  asked(): void {
    for (const a of this.admissions) {
      if (a.starting > 0) {
        a.starting--;
        break;
      }
    }
    this.dispatchSoon();
  }

  /** @internal */
  closed(lease: SlotLease): void {
    this.leases.delete(lease);
    this.dispatch();
  }

  /** Rollouts asked for in one synchronous pass (a chunk's) are all queued before a new activity is admitted. */
  dispatchSoon(): void {
    this.soon ??= setImmediate(() => {
      this.soon = undefined;
      this.dispatch();
    });
  }

  dispatch(): void {
    for (let k = 0; k < this.waiting.length;) {
      const w = this.waiting[k]!;
      if (w.lease.running === 0) {
        // Its own seat came free (its other rollouts ended): no extra needed.
        this.waiting.splice(k, 1);
        w.go();
      } else if (this.held() < this.size) {
        this.waiting.splice(k, 1);
        this.extras++;
        w.go();
      } else {
        k++;
      }
    }
    for (const a of this.admissions) {
      if (!this.canAdmit()) return;
      a.issue();
    }
  }
}

/** One activity's rollouts on the worker's slots. */
export class SlotLease {
  running = 0;
  private asked = false;
  private open = true;
  /** Rollouts over the activity's own cap: each takes the slot of one that ends. */
  private readonly capped: (() => void)[] = [];

  constructor(private readonly pool: RolloutSlots, readonly cap: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    await this.acquire();
    try {
      return await fn();
    } finally {
      const next = this.capped.shift();
      if (next) {
        // A chunk-mate waiting on the cap takes this slot as it is (seat or extra).
        next();
      } else {
        this.running--;
        // With others still running, the slot freed counts as one of the extras; else the seat is idle.
        this.pool.released(this.running >= 1);
      }
    }
  }

  private async acquire(): Promise<void> {
    if (!this.asked) {
      this.asked = true;
      this.pool.asked();
    }
    if (this.running >= this.cap) {
      await new Promise<void>((r) => this.capped.push(r));
      return;
    }
    if (this.running === 0) {
      this.running++;
      return;
    }
    await new Promise<void>((r) => {
      if (this.pool.acquireExtra(this, () => { this.running++; r(); })) {
        this.running++;
        r();
      }
    });
  }

  close(): void {
    if (!this.open) return;
    this.open = false;
    if (!this.asked) {
      this.asked = true;
      this.pool.asked();
    }
    this.pool.closed(this);
  }
}

interface Pending { resolve: (p: SlotPermit) => void; reject: (e: unknown) => void }

/** The Temporal worker's activity slot supplier: a permit (and so a poll) only while `canAdmit`. */
class Admission implements CustomSlotSupplier<ActivitySlotInfo> {
  readonly type = 'custom' as const;
  /** Permits held by polls that have brought no task yet. */
  idle = 0;
  /** Permits whose task runs (marked used, not yet released). */
  active = 0;
  /** Tasks admitted whose activity has not asked for its rollouts yet. */
  starting = 0;
  private readonly pending: Pending[] = [];

  constructor(private readonly pool: RolloutSlots) {}

  reserveSlot(_ctx: unknown, abortSignal: AbortSignal): Promise<SlotPermit> {
    if (abortSignal.aborted) return Promise.reject(abortSignal.reason);
    if (this.pool.canAdmit()) {
      this.idle++;
      return Promise.resolve({});
    }
    return new Promise<SlotPermit>((resolve, reject) => {
      const p: Pending = {
        resolve: (permit) => { abortSignal.removeEventListener('abort', onAbort); resolve(permit); },
        reject,
      };
      const onAbort = () => {
        const i = this.pending.indexOf(p);
        if (i >= 0) this.pending.splice(i, 1);
        reject(abortSignal.reason);
      };
      abortSignal.addEventListener('abort', onAbort, { once: true });
      this.pending.push(p);
    });
  }

  tryReserveSlot(): SlotPermit | null {
    if (!this.pool.canAdmit()) return null;
    this.idle++;
    return {};
  }

  markSlotUsed(): void {
    this.idle = Math.max(0, this.idle - 1);
    this.active++;
    this.starting++;
  }

  releaseSlot(ctx: SlotReleaseContext<ActivitySlotInfo>): void {
    if (ctx.slotInfo) {
      this.active = Math.max(0, this.active - 1);
      // A task released without ever asking (it failed before its rollouts) no longer holds the gate.
      this.starting = Math.min(this.starting, this.active);
    } else {
      this.idle = Math.max(0, this.idle - 1);
    }
    this.pool.dispatch();
  }

  /** Hands a permit to the oldest waiting poll, if any. */
  issue(): void {
    const p = this.pending.shift();
    if (!p) return;
    this.idle++;
    p.resolve({});
  }

  /** The worker stopped: its permits are gone. */
  closeAll(): void {
    this.idle = 0;
    this.active = 0;
    this.starting = 0;
  }
}
