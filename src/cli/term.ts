/**
 * Terminal output: colors only when the stream is a TTY (and NO_COLOR is unset),
 * progress bars on stderr so stdout stays clean for pipes.
 */
const colorOn = (stream: NodeJS.WriteStream): boolean => Boolean(stream.isTTY) && !process.env.NO_COLOR && process.env.TERM !== 'dumb';

const paint = (code: number, stream: NodeJS.WriteStream = process.stdout) => (s: string): string => (colorOn(stream) ? `\x1b[${code}m${s}\x1b[0m` : s);

export const c = {
  bold: paint(1), dim: paint(2), red: paint(31), green: paint(32), yellow: paint(33), blue: paint(34), cyan: paint(36),
  err: { red: paint(31, process.stderr), yellow: paint(33, process.stderr), dim: paint(2, process.stderr) },
};

export function stdoutColor(): boolean {
  return colorOn(process.stdout);
}

/** A one-line progress bar on stderr, redrawn in place on a TTY; on a pipe, a line per change of ~10%. */
export class ProgressBar {
  private lastPrinted = -1;
  private active = false;
  constructor(private readonly stream: NodeJS.WriteStream = process.stderr, private readonly width = 28) {}

  update(done: number, total: number, label: string): void {
    const frac = total > 0 ? Math.min(1, done / total) : 0;
    if (this.stream.isTTY) {
      const filled = Math.round(frac * this.width);
      const bar = `${'█'.repeat(filled)}${'░'.repeat(this.width - filled)}`;
      const pct = `${Math.round(frac * 100)}`.padStart(3);
      this.stream.write(`\r\x1b[2K${colorOn(this.stream) ? `\x1b[36m${bar}\x1b[0m` : bar} ${pct}% ${done}/${total} ${label}`);
      this.active = true;
    } else {
      const decile = Math.floor(frac * 10);
      if (decile !== this.lastPrinted) {
        this.stream.write(`${label}: ${done}/${total}\n`);
        this.lastPrinted = decile;
      }
    }
  }

  /** Clears the bar so a normal line can be printed above it. */
  clear(): void {
    if (this.active && this.stream.isTTY) this.stream.write('\r\x1b[2K');
    this.active = false;
  }
}

export function fmtMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)}s`;
  return `${(ms / 60_000).toFixed(1)}m`;
}

export function fmtReward(x: number | undefined): string {
  return x === undefined || !Number.isFinite(x) ? '—' : (x >= 0 ? ' ' : '') + x.toFixed(3);
}

/** Parses durations like 30s, 30m, 2h, 1d into milliseconds; undefined if malformed. */
export function parseDuration(s: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(s.trim());
  if (!m) return undefined;
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 'ms' | 's' | 'm' | 'h' | 'd'];
  return Number(m[1]) * unit;
}
