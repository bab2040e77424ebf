import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { ReportData } from './aggregate';

/**
 * Renders the run report: one HTML file with Chart.js and the data inlined, so it
 * opens offline, from an e-mail attachment or a CI artifact, years later.
 * The page sets `data-rendered="true"` on <body> once every chart drew (the
 * headless-browser test waits on it).
 */

let chartJsCache: string | undefined;

/** Chart.js's UMD build, from node_modules (its package exports hide dist/, so resolve beside the main file). */
export function chartJsSource(): string {
  if (chartJsCache === undefined) {
    const file = path.join(path.dirname(require.resolve('chart.js')), 'chart.umd.min.js');
    // A literal "</script" inside an inline script would end it early.
    chartJsCache = readFileSync(file, 'utf8').replace(/<\/script/gi, '<\\/script');
  }
  return chartJsCache;
}

const escapeHtml = (s: string): string =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

function fmtDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 120) return `${s.toFixed(1)} s`;
  const m = s / 60;
  if (m < 120) return `${m.toFixed(1)} min`;
  return `${(m / 60).toFixed(1)} h`;
}

function fmtNumber(x: number): string {
  if (Math.abs(x) >= 1e6) return `${(x / 1e6).toFixed(2)} M`;
  if (Math.abs(x) >= 1e4) return `${(x / 1e3).toFixed(1)} k`;
  return Number.isInteger(x) ? String(x) : x.toFixed(3);
}

function card(label: string, value: string, note = ''): string {
  return `<div class="card"><div class="label">${escapeHtml(label)}</div><div class="value">${escapeHtml(value)}</div>` +
    `${note ? `<div class="note">${escapeHtml(note)}</div>` : ''}</div>`;
}

function rolloutShareCard(data: ReportData): string {
  const top = [...data.phases].sort((a, b) => b.share - a.share)[0]!;
  return card('largest phase', `${(top.share * 100).toFixed(0)}%`, `${top.phase}, of phase time`);
}

function latestEvalCard(data: ReportData): string {
  const series = data.evals[0];
  if (!series) return card('latest eval', '—', 'no EvalSweep yet');
  const i = series.versions.length - 1;
  const pass = series.passAt1[i];
  const f1 = series.fileF1[i];
  const [label, value] = pass !== null && pass !== undefined ? ['eval pass@1', `${(pass * 100).toFixed(1)}%`]
    : f1 !== null && f1 !== undefined ? ['eval file F1', `${(f1 * 100).toFixed(1)}%`] : ['eval reward', (series.reward[i] ?? 0).toFixed(3)];
  return card(label, value, `${series.taskset}, policy v${series.versions[i]}`);
}

function phaseTable(data: ReportData): string {
  const rows = data.phases.map((p) => `<tr><td>${p.phase}</td><td class="num">${fmtDuration(p.totalMs)}</td>` +
    `<td class="num">${fmtDuration(p.meanMs)}</td><td class="num">${(p.share * 100).toFixed(1)}%</td>` +
    `<td class="bar"><span style="width:${(p.share * 100).toFixed(1)}%" class="phase-${p.phase}"></span></td></tr>`).join('');
  const total = data.phases.reduce((s, p) => s + p.totalMs, 0);
  return `<table class="phases"><thead><tr><th>phase</th><th class="num">total</th><th class="num">mean / step</th><th class="num">share</th><th></th></tr></thead>` +
    `<tbody>${rows}</tbody><tfoot><tr><td>all phases</td><td class="num">${fmtDuration(total)}</td><td class="num">${fmtDuration(total / Math.max(1, data.summary.steps))}</td><td class="num">100%</td><td></td></tr></tfoot></table>`;
}

function evalTable(data: ReportData): string {
  if (data.evals.length === 0) {
    return `<p class="empty">No eval results yet. Run <code>ratchet eval --run ${escapeHtml(data.runId)} --newest 1</code> ` +
      `or schedule sweeps with <code>ratchet schedule eval --run ${escapeHtml(data.runId)} --every 30m</code>, ` +
      `or let the run evaluate itself every N steps (<code>[eval] every_steps</code>, <code>ratchet set ${escapeHtml(data.runId)} --eval-every N</code>).</p>`;
  }
  const pct = (x: number | null): string => (x === null ? '—' : `${(x * 100).toFixed(1)}%`);
  return data.evals.map((s) => {
    const rows = s.versions.map((v, i) => `<tr><td class="num">v${v}</td><td class="num">${pct(s.passAt1[i] ?? null)}</td>` +
      `<td class="num">${pct(s.passAtK[i] ?? null)}</td><td class="num">${(s.reward[i] ?? 0).toFixed(3)}</td>` +
      `<td class="num">${pct(s.fileF1[i] ?? null)}</td><td class="num">${pct(s.functionF1[i] ?? null)}</td>` +
      `<td class="num">${Math.round(s.tokensPerEpisode[i] ?? 0)}</td><td class="num">${(s.toolCallsPerEpisode[i] ?? 0).toFixed(1)}</td></tr>`).join('');
    return `<h3>${escapeHtml(s.taskset)} <span class="muted">(${escapeHtml(s.hash.slice(0, 12))}, k=${s.k})</span></h3>` +
      `<table><thead><tr><th class="num">policy</th><th class="num">pass@1</th><th class="num">pass@${s.k}</th><th class="num">reward</th>` +
      `<th class="num">file F1</th><th class="num">function F1</th><th class="num">tokens / ep</th><th class="num">tool calls / ep</th></tr></thead><tbody>${rows}</tbody></table>`;
  }).join('');
}

function evalSweepTable(data: ReportData): string {
  if (!data.evalSweeps.length) return '';
  const pct = (x: number | null): string => (x === null ? '—' : `${(x * 100).toFixed(1)}%`);
  const rows = data.evalSweeps.map((s) => `<tr><td class="num">${s.step}</td><td class="num">v${s.policyVersion}</td><td><code>${escapeHtml(s.workflowId)}</code></td>` +
    `<td>${escapeHtml(s.taskset)} (k=${s.k})</td>` +
    (s.result ? `<td class="num">${pct(s.result.passAt1)}</td><td class="num">${s.result.reward.toFixed(3)}</td>`
      : `<td colspan="2" class="muted">no result yet: running, or failed (<code>temporal workflow describe -w ${escapeHtml(s.workflowId)}</code>)</td>`) + '</tr>').join('');
  return '<h3>In-run eval sweeps <span class="muted">([eval] every_steps, <code>ratchet set --eval-every</code>)</span></h3>' +
    `<table><thead><tr><th class="num">after step</th><th class="num">policy</th><th>sweep</th><th>task set</th><th class="num">pass@1</th><th class="num">reward</th></tr></thead><tbody>${rows}</tbody></table>`;
}

const CSS = `
:root{--bg:#f6f7fb;--panel:#fff;--ink:#1d2433;--muted:#6b7385;--line:#e3e6ee;--accent:#3b5bdb}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;background:var(--bg);color:var(--ink)}
header{padding:22px 32px 14px;background:linear-gradient(120deg,#1f2a44,#3b5bdb);color:#fff}
header h1{margin:0;font-size:22px;font-weight:650;letter-spacing:.2px}
header .sub{opacity:.8;margin-top:4px;font-size:13px}
main{padding:18px 32px 40px;max-width:1480px;margin:0 auto}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(140px,1fr));gap:12px;margin-bottom:18px}
.card{background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:12px 14px}
.card .label{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.5px}
.card .value{font-size:22px;font-weight:650;margin-top:2px}
.card .note{color:var(--muted);font-size:12px}
.grid{display:grid;grid-template-columns:repeat(2,minmax(0,1fr));gap:16px}
.row3{grid-column:1/-1;display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:16px}
@media (max-width:1000px){.row3{grid-template-columns:1fr}}
@media (max-width:1000px){.grid{grid-template-columns:1fr}}
section{background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:14px 16px}
section.wide{grid-column:1/-1}
section h2{font-size:15px;margin:0 0 2px}
section .hint{color:var(--muted);font-size:12px;margin:0 0 10px}
.chart{position:relative;height:260px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{padding:6px 8px;border-bottom:1px solid var(--line);text-align:left}
th{color:var(--muted);font-weight:600;font-size:12px}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
tfoot td{font-weight:600;border-bottom:none}
td.bar{width:35%}
td.bar span{display:block;height:10px;border-radius:5px;min-width:2px}
.phase-rollout{background:#3b5bdb}.phase-scoring{background:#12b886}.phase-batch{background:#fab005}.phase-train{background:#e8590c}.phase-sync{background:#ae3ec9}
h3{font-size:14px;margin:14px 0 6px}
.muted{color:var(--muted);font-weight:400}
.empty{color:var(--muted)}
code{background:#eef1f8;padding:1px 5px;border-radius:4px}
footer{color:var(--muted);font-size:12px;padding:0 32px 24px;text-align:center}
`;

/** The page's own script: reads the inlined data and draws every chart. Plain ES2017, no build step. */
const CLIENT_JS = String.raw`
(function () {
  var D = JSON.parse(document.getElementById('ratchet-data').textContent);
  var PALETTE = ['#3b5bdb','#12b886','#e8590c','#ae3ec9','#fab005','#0c8599','#d6336c','#5c940d','#495057','#1098ad'];
  var rgba = function (hex, a) { var n = parseInt(hex.slice(1), 16); return 'rgba(' + (n >> 16) + ',' + ((n >> 8) & 255) + ',' + (n & 255) + ',' + a + ')'; };
  Chart.defaults.animation = false;
  Chart.defaults.responsive = true;
  Chart.defaults.maintainAspectRatio = false;
  Chart.defaults.font.family = 'system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif';
  Chart.defaults.color = '#4a5266';
  Chart.defaults.plugins.legend.labels.boxWidth = 12;
  var charts = [];
  var make = function (id, cfg) { var el = document.getElementById(id); if (el) charts.push(new Chart(el, cfg)); };
  var stepAxis = { title: { display: true, text: 'step' }, grid: { display: false } };
  var labels = D.steps;

  var lo = D.reward.mean.map(function (m, i) { return m - D.reward.std[i]; });
  var hi = D.reward.mean.map(function (m, i) { return m + D.reward.std[i]; });
  make('chart-reward', { type: 'line', data: { labels: labels, datasets: [
    { label: 'max', data: D.reward.max, borderColor: 'transparent', pointRadius: 0, backgroundColor: rgba('#3b5bdb', 0.08), fill: '+3' },
    { label: 'mean + std', data: hi, borderColor: 'transparent', pointRadius: 0, backgroundColor: rgba('#3b5bdb', 0.18), fill: '+1' },
    { label: 'mean', data: D.reward.mean, borderColor: '#3b5bdb', backgroundColor: '#3b5bdb', borderWidth: 2.5, pointRadius: labels.length > 40 ? 0 : 2.5, tension: 0.25 },
    { label: 'mean - std', data: lo, borderColor: 'transparent', pointRadius: 0, fill: false },
    { label: 'min', data: D.reward.min, borderColor: 'transparent', pointRadius: 0, fill: false }
  ].concat(D.baseline ? [{ label: 'baseline ' + D.baseline.runId, data: D.baseline.mean, borderColor: '#e8590c', backgroundColor: '#e8590c',
    borderDash: [6, 4], borderWidth: 2, pointRadius: labels.length > 40 ? 0 : 2, tension: 0.25, spanGaps: true, fill: false }] : []) },
    options: { interaction: { mode: 'index', intersect: false }, scales: { x: stepAxis, y: { title: { display: true, text: 'reward' } } },
    plugins: { legend: { labels: { filter: function (it) { return it.datasetIndex <= 2 || it.datasetIndex === 5; },
      generateLabels: function (c) { var l = Chart.defaults.plugins.legend.labels.generateLabels(c);
        return l.map(function (x) { if (x.text === 'max') x.text = 'min–max'; if (x.text === 'mean + std') x.text = '± std'; return x; }); } } } } } });

  make('chart-components', { type: 'line', data: { labels: labels, datasets: Object.keys(D.components).map(function (name, i) {
    return { label: name, data: D.components[name], borderColor: PALETTE[i % PALETTE.length], backgroundColor: PALETTE[i % PALETTE.length], borderWidth: 2, pointRadius: 0, tension: 0.25, spanGaps: true };
  }) }, options: { interaction: { mode: 'index', intersect: false }, scales: { x: stepAxis, y: { title: { display: true, text: 'component mean' } } } } });

  if (D.mismatch && D.mismatch.absMean.some(function (x) { return x !== null; })) {
    make('chart-mismatch', { type: 'line', data: { labels: labels, datasets: [
      { label: 'mean |Δ logprob|', data: D.mismatch.absMean, borderColor: '#3b5bdb', backgroundColor: '#3b5bdb', borderWidth: 2, pointRadius: 2, yAxisID: 'y', spanGaps: true },
      { label: 'max |Δ logprob|', data: D.mismatch.absMax, borderColor: '#e8590c', backgroundColor: '#e8590c', borderWidth: 2, pointRadius: 2, yAxisID: 'y', spanGaps: true },
      { label: 'tokens masked', data: D.mismatch.maskedFrac, borderColor: '#ae3ec9', backgroundColor: '#ae3ec9', borderDash: [4, 3], borderWidth: 2, pointRadius: 0, yAxisID: 'y1', spanGaps: true },
      { label: 'tokens capped', data: D.mismatch.cappedFrac, borderColor: '#12b886', backgroundColor: '#12b886', borderDash: [4, 3], borderWidth: 2, pointRadius: 0, yAxisID: 'y1', spanGaps: true }
    ] }, options: { interaction: { mode: 'index', intersect: false }, scales: { x: stepAxis,
      y: { position: 'left', type: 'logarithmic', title: { display: true, text: '|Δ logprob| (nats)' } },
      y1: { position: 'right', beginAtZero: true, grid: { drawOnChartArea: false }, title: { display: true, text: 'share of tokens' } } } } });
  }

  make('chart-throughput', { type: 'line', data: { labels: labels, datasets: [
    { label: 'episodes / hour', data: D.throughput.episodesPerHour, borderColor: '#12b886', backgroundColor: rgba('#12b886', 0.15), fill: true, borderWidth: 2, pointRadius: 0, yAxisID: 'y' },
    { label: 'tokens / second', data: D.throughput.tokensPerSecond, borderColor: '#e8590c', backgroundColor: '#e8590c', borderWidth: 2, pointRadius: 0, yAxisID: 'y1' }
  ] }, options: { interaction: { mode: 'index', intersect: false }, scales: { x: stepAxis,
    y: { position: 'left', beginAtZero: true, title: { display: true, text: 'episodes / hour' } },
    y1: { position: 'right', beginAtZero: true, grid: { drawOnChartArea: false }, title: { display: true, text: 'tokens / s' } } } } });

  make('chart-phases', { type: 'doughnut', data: { labels: D.phases.map(function (p) { return p.phase; }), datasets: [{
    data: D.phases.map(function (p) { return p.totalMs / 1000; }), backgroundColor: ['#3b5bdb','#12b886','#fab005','#e8590c','#ae3ec9'], borderWidth: 1 }] },
    options: { cutout: '58%', plugins: { legend: { position: 'right' }, tooltip: { callbacks: { label: function (c) { return c.label + ': ' + c.parsed.toFixed(1) + ' s'; } } } } } });

  var hbar = function (id, pairs, color, axis) {
    make(id, { type: 'bar', data: { labels: pairs.map(function (p) { return p[0]; }), datasets: [{ label: axis, data: pairs.map(function (p) { return p[1]; }),
      backgroundColor: rgba(color, 0.8), borderRadius: 4 }] }, options: { indexAxis: 'y', plugins: { legend: { display: false } },
      scales: { x: { beginAtZero: true, title: { display: true, text: axis } }, y: { grid: { display: false } } } } });
  };
  hbar('chart-tools', D.tools, '#3b5bdb', 'tool calls');
  hbar('chart-shell', D.shell, '#0c8599', 'commands');

  make('chart-staleness', { type: 'bar', data: { labels: D.staleness.map(function (p) { return p[0]; }), datasets: [{ label: 'samples',
    data: D.staleness.map(function (p) { return p[1]; }), backgroundColor: rgba('#ae3ec9', 0.8), borderRadius: 4 }] },
    options: { plugins: { legend: { display: false } }, scales: { x: { title: { display: true, text: 'policy versions behind' }, grid: { display: false } },
      y: { beginAtZero: true, title: { display: true, text: 'samples' } } } } });

  D.evals.forEach(function (s, i) {
    var ds = [
      { label: 'pass@1', data: s.passAt1, borderColor: '#3b5bdb' },
      { label: 'pass@' + s.k, data: s.passAtK, borderColor: '#12b886' },
      { label: 'file F1', data: s.fileF1, borderColor: '#e8590c' },
      { label: 'function F1', data: s.functionF1, borderColor: '#ae3ec9' },
      { label: 'mean reward', data: s.reward, borderColor: '#495057', borderDash: [5, 4] }
    ].filter(function (d) { return d.data.some(function (x) { return x !== null; }); })
     .map(function (d) { d.backgroundColor = d.borderColor; d.borderWidth = 2; d.pointRadius = 3; d.spanGaps = true; return d; });
    make('chart-eval-' + i, { type: 'line', data: { labels: s.versions.map(function (v) { return 'v' + v; }), datasets: ds },
      options: { interaction: { mode: 'index', intersect: false }, scales: { x: { title: { display: true, text: 'policy version' }, grid: { display: false } }, y: { beginAtZero: true } } } });
  });

  document.body.dataset.charts = String(charts.length);
  if (D.cost) {
    make('chart-cost', { type: 'line', data: { labels: labels, datasets: [
      { label: 'sandbox CPU-s', data: D.cost.perStep.sandbox_cpu_s, borderColor: '#3b5bdb' },
      { label: 'sandbox container-s', data: D.cost.perStep.sandbox_container_s, borderColor: '#12b886' },
      { label: 'trainer CPU-s', data: D.cost.perStep.trainer_cpu_s, borderColor: '#e8590c' },
      { label: 'trainer GPU-s', data: D.cost.perStep.trainer_gpu_s, borderColor: '#ae3ec9' },
    ].map(function (d) { d.backgroundColor = d.borderColor; d.borderWidth = 2; d.pointRadius = 2; d.spanGaps = true; return d; }) },
      options: { maintainAspectRatio: false, scales: { y: { beginAtZero: true, title: { display: true, text: 'seconds per step' } } } } });
  }
  requestAnimationFrame(function () { document.body.dataset.rendered = 'true'; });
})();
`;

function lineageTable(data: ReportData): string {
  const rows = data.lineage.map((l) => `<tr><td class="num">${l.step}</td><td>${escapeHtml(l.build ?? 'unversioned')}</td>` +
    `<td><code>${escapeHtml(l.batch ?? '-')}</code></td><td><code>${escapeHtml(l.adapter ?? '-')}</code></td><td><code>ratchet lineage ${escapeHtml(data.runId)} ${l.step}</code></td></tr>`).join('');
  if (!rows) return '<p class="empty">No lineage recorded in this run (steps from before 0.6.0).</p>';
  return `<table><thead><tr><th class="num">step</th><th>build</th><th>batch sha256</th><th>adapter sha256</th><th>all of it</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function signalTable(data: ReportData): string {
  if (!data.signal.length) return '<p class="empty">No informative-group counts recorded in this run (steps from before them).</p>';
  const rows = data.signal.map((s) => `<tr><td class="num">${s.step}</td><td class="num">${s.sampledBy !== undefined ? `v${s.sampledBy}` : '-'}</td>` +
    `<td class="num">${s.groups ?? '-'}</td><td class="num">${s.informative}</td><td class="num">${s.refillRounds}</td></tr>`).join('');
  return `<table><thead><tr><th class="num">step</th><th class="num">sampled by</th><th class="num">groups</th><th class="num">informative</th><th class="num">refill rounds</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function controlTable(data: ReportData): string {
  if (!data.controls.length) return '<p class="empty">No control actions recorded in this run.</p>';
  const rows = data.controls.map((a) => {
    const show = (k: string, v: unknown): string => (v && typeof v === 'object' ? Object.entries(v).map(([f, x]) => `${k}.${f} = ${String(x)}`).join(', ') : `${k} = ${String(v)}`);
    const changes = a.changes ? Object.entries(a.changes).map(([k, v]) => show(k, v)).join(', ') : '';
    return `<tr><td>${escapeHtml(a.time)}</td><td class="num">${a.step}</td><td>${escapeHtml(a.action)}${changes ? ` (${escapeHtml(changes)})` : ''}</td>` +
      `<td>${escapeHtml(a.identity)}</td><td>${a.reason ? escapeHtml(a.reason) : '<span class="hint">no reason given</span>'}</td></tr>`;
  }).join('');
  return `<table><thead><tr><th>time</th><th class="num">step</th><th>action</th><th>by</th><th>reason</th></tr></thead><tbody>${rows}</tbody></table>`;
}

const COST_LABELS: Record<string, string> = {
  sandbox_containers: 'sandbox containers', sandbox_container_s: 'sandbox container-seconds', sandbox_cpu_s: 'sandbox CPU-seconds',
  trainer_cpu_s: 'trainer CPU-seconds', trainer_gpu_s: 'trainer GPU-seconds', tokens_generated: 'tokens generated',
  tokens_trained: 'tokens trained', temporal_events: 'TrainRun history events', temporal_child_events: 'rollout children\'s history events',
};

function costTable(data: ReportData): string {
  if (!data.cost) return '<p class="empty">No cost recorded in this run (steps from before the cost ledger).</p>';
  const rows = data.cost.rows.map((r) => `<tr><td>${escapeHtml(COST_LABELS[r.key] ?? r.key)} <code>${r.key}</code></td>` +
    `<td class="num">${fmtNumber(r.total)}</td><td class="num">${fmtNumber(r.meanPerStep)}</td><td class="num">${fmtNumber(r.last)}</td></tr>`).join('');
  return `<table><thead><tr><th>figure</th><th class="num">total (${data.cost.steps} steps)</th><th class="num">mean / step</th><th class="num">last step</th></tr></thead><tbody>${rows}</tbody></table>`;
}

function section(id: string, title: string, hint: string, body: string, wide = false): string {
  return `<section class="${wide ? 'wide' : ''}" id="sec-${id}"><h2>${escapeHtml(title)}</h2><p class="hint">${hint}</p>${body}</section>`;
}

const canvas = (id: string, height = 260): string => `<div class="chart" style="height:${height}px"><canvas id="${id}"></canvas></div>`;

export function renderReportHtml(data: ReportData, chartJs: string = chartJsSource()): string {
  const s = data.summary;
  const dataJson = JSON.stringify(data).replace(/</g, '\\u003c');
  const none = (what: string): string => `<p class="empty">No ${what} recorded in this run.</p>`;
  const evalCharts = data.evals.map((_, i) => canvas(`chart-eval-${i}`, 240)).join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Ratchet report: ${escapeHtml(data.runId)}</title><style>${CSS}</style></head>
<body data-rendered="false">
<header><h1>Ratchet run <span>${escapeHtml(data.runId)}</span></h1>
<div class="sub">steps ${s.firstStep}–${s.lastStep} · ${escapeHtml(s.startedAt)} → ${escapeHtml(s.finishedAt)} · generated ${escapeHtml(data.generatedAt)}</div></header>
<main>
<div class="cards">
${card('steps', String(s.steps), `policy v${s.policyVersion}`)}
${card('last mean reward', s.lastMeanReward.toFixed(3), `step ${s.lastStep}`)}
${card('best mean reward', s.bestMeanReward.toFixed(3), `step ${s.bestStep}`)}
${card('episodes', fmtNumber(s.episodes), `${(s.episodes / Math.max(s.wallMs / 3_600_000, 1e-9)).toFixed(0)} / hour`)}
${card('tokens', fmtNumber(s.tokens), `${(s.tokens / Math.max(s.wallMs / 1000, 1e-9)).toFixed(0)} / s`)}
${card('wall time', fmtDuration(s.wallMs), `${fmtDuration(s.wallMs / Math.max(1, s.steps))} / step`)}
${rolloutShareCard(data)}
${latestEvalCard(data)}
</div>
<div class="grid">
${section('reward', 'Reward per step', 'Mean over the step\'s rollouts; bands show ± one standard deviation and the min–max range.' +
    (data.baseline ? ` Dashed: the mean reward of run ${escapeHtml(data.baseline.runId)} at the same steps.` : ''), canvas('chart-reward', 300), true)}
${section('components', 'Reward components', 'Each rubric component\'s mean, logged on its own.', Object.keys(data.components).length ? canvas('chart-components') : none('reward components'))}
${section('mismatch', 'Train/inference mismatch', 'How far the trainer\'s logprobs of the sampled tokens are from vLLM\'s, and the share of tokens the loss\'s correction masked (floor logprobs, or over the threshold) or capped (truncated importance weight).',
    data.mismatch.absMean.some((x) => x !== null) ? canvas('chart-mismatch') : none('trainer mismatch metrics'))}
${section('throughput', 'Throughput', 'Finished episodes per hour and tokens per second, per step wall time.', canvas('chart-throughput'))}
${section('phases', 'Compute and wall time per phase', 'Summed over steps. With async_level ≥ 1 phases overlap, so shares are of summed phase time, not of wall time.',
    `<div style="display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:12px;align-items:center">${phaseTable(data)}${canvas('chart-phases', 200)}</div>`, true)}
<div class="row3">
${section('tools', 'Tool usage', 'Tool calls by tool, over all steps.', data.tools.length ? canvas('chart-tools', Math.max(160, 28 * data.tools.length + 60)) : none('tool calls'))}
${section('shell', 'Shell commands', 'Programs the agent ran (first word of each command), top 20.', data.shell.length ? canvas('chart-shell', Math.max(160, 22 * data.shell.length + 60)) : none('shell commands'))}
${section('staleness', 'Staleness', 'Samples by how many policy versions their rollout lagged the trainer (bounded by async_level).', data.staleness.length ? canvas('chart-staleness', 220) : none('staleness'))}
</div>
${section('cost', 'What the run cost', 'The cost ledger, per step: sandbox containers and their Docker container-seconds and CPU-seconds, trainer CPU and GPU seconds, tokens generated and trained, TrainRun\'s history events. Budgets ([budget], <code>ratchet set --budget</code>) bound the run\'s totals.',
    `${costTable(data)}${data.cost ? canvas('chart-cost', 220) : ''}`, true)}
${section('signal', 'Learning signal per step', 'Groups rolled out, and the informative ones: their rewards were not all alike, so only they had a non-zero advantage. With [orchestrator] difficulty_filter, uniform groups are dropped and refill rounds sample more; "sampled by" is the policy version the step\'s rollouts started on.', signalTable(data), true)}
${section('lineage', 'Lineage', `Where each step came from: the worker build, the batch and the adapter it produced. Everything recorded (task rows, env and sampling settings, rollout policy versions, seeds, checkpoints): <code>ratchet lineage ${escapeHtml(data.runId)} &lt;step&gt;</code>.`, lineageTable(data), true)}
${section('controls', 'Control actions', 'Every pause, resume, stop and settings change the run accepted: who sent it, why, and the step whose record holds it (`ratchet pause|resume|stop|set --reason`). Changes take effect at the next step boundary.', controlTable(data), true)}
${section('evals', 'Evaluation across policy versions', 'EvalSweep results on held-out task sets: unbiased pass@k where tests decide, localization F1, reward.', `${evalCharts}${evalTable(data)}${evalSweepTable(data)}`, data.evals.length > 0 || data.evalSweeps.length > 0)}
</div></main>
<footer>Ratchet · single-file report, works offline · Chart.js inlined</footer>
<script type="application/json" id="ratchet-data">${dataJson}</script>
<script>${chartJs}</script>
<script>${CLIENT_JS}</script>
</body></html>
`;
}
