// The machine's CPU busy fraction during each suite, from /proc/stat samples (infra/test.sh writes
// them into cpu.tsv during the integration stage; summarize-tests.js prints the figure): a suite
// that mostly waits (timeouts, heartbeats, an idle CPU) is one that could run beside another.
// Pure functions, so test/unit/infra/cpuUsage.test.ts checks them on samples it makes up.

/**
 * cpu.tsv's lines: epoch milliseconds, then /proc/stat's aggregate "cpu" counters in its order
 * (user nice system idle iowait irq softirq steal ...), tab-separated. Unreadable lines are skipped.
 */
function parseCpuSamples(text) {
  const out = [];
  for (const line of text.split('\n')) {
    const f = line.trim().split(/\s+/).map(Number);
    if (f.length < 9 || !f.every(Number.isFinite)) continue;
    const [t, user, nice, system, idle, iowait, irq, softirq, steal] = f;
    // guest and guest_nice (fields 9, 10) are already counted in user and nice.
    const total = user + nice + system + idle + iowait + irq + softirq + steal;
    out.push({ t, total, idle: idle + iowait });
  }
  return out.sort((a, b) => a.t - b.t);
}

/** Between consecutive samples: the interval [from, to] and the busy fraction of all cores in it (0..1). */
function busyIntervals(samples) {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1], b = samples[i];
    const dTotal = b.total - a.total;
    if (b.t <= a.t || dTotal <= 0) continue;
    out.push({ from: a.t, to: b.t, busy: (dTotal - (b.idle - a.idle)) / dTotal });
  }
  return out;
}

/** The busy fraction over [start, end], each interval weighted by its overlap; undefined when no sample covers it. */
function meanBusy(intervals, start, end) {
  let weight = 0, sum = 0;
  for (const iv of intervals) {
    const overlap = Math.min(iv.to, end) - Math.max(iv.from, start);
    if (overlap <= 0) continue;
    weight += overlap;
    sum += overlap * iv.busy;
  }
  return weight > 0 ? sum / weight : undefined;
}

/** For each suite ({ suite, start, end } in epoch ms), its mean busy fraction (undefined: not sampled). */
function suiteCpu(samples, suites) {
  const intervals = busyIntervals(samples);
  return suites.map((s) => ({ ...s, busy: meanBusy(intervals, s.start, s.end) }));
}

module.exports = { parseCpuSamples, busyIntervals, meanBusy, suiteCpu };
