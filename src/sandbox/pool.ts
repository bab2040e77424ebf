import type { Logger } from '../shared/logger';

export interface WarmPoolOptions<T> {
  size: number;
  create: () => Promise<T>;
  destroy: (item: T) => Promise<void>;
  log: Logger;
}

/**
 * Keeps `size` ready items (started, hardened, empty containers) so an acquire
 * skips create+start. `take` hands one out and refills in the background; a
 * failed create is logged and retried only at the next take, so a dead dockerd
 * does not turn into a busy loop.
 */
export class WarmPool<T> {
  private readonly ready: T[] = [];
  private readonly inflight = new Set<Promise<void>>();
  private closed = false;

  constructor(private readonly opts: WarmPoolOptions<T>) {}

  get available(): number {
    return this.ready.length;
  }

  take(): T | undefined {
    const item = this.ready.shift();
    this.fill();
    return item;
  }

  fill(): void {
    while (!this.closed && this.ready.length + this.inflight.size < this.opts.size) {
      const job: Promise<void> = this.opts
        .create()
        .then(async (item) => {
          if (this.closed) await this.opts.destroy(item);
          else this.ready.push(item);
        })
        .catch((err: unknown) => this.opts.log.warn({ err: String(err) }, 'warm pool could not create a container'))
        .finally(() => this.inflight.delete(job));
      this.inflight.add(job);
    }
  }

  /** Resolves once no create is in flight (benchmarks and tests wait on this). */
  async settled(): Promise<void> {
    while (this.inflight.size > 0) await Promise.all([...this.inflight]);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.settled();
    const items = this.ready.splice(0);
    await Promise.all(items.map((item) => this.opts.destroy(item).catch((err: unknown) => this.opts.log.warn({ err: String(err) }, 'could not remove a warm container'))));
  }
}
