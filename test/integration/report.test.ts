/// <reference lib="dom" />
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { generateReport } from '../../src/report';
import { syntheticEvalResults, syntheticStepRecords } from '../../src/report/synthetic';
import { paths } from '../../src/shared/paths';

const CHROMIUM = '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium && process.env.RATCHET_REQUIRE_STACK === '1') {
  // CI installs Chromium (infra/test.sh): there, a missing browser is a defect, not a skip.
  throw new Error(`RATCHET_REQUIRE_STACK=1 but ${CHROMIUM} is missing. Fix: apt-get install -y chromium`);
}
if (!haveChromium) console.warn(`SKIPPED report render test: ${CHROMIUM} missing. Fix: apt-get install -y chromium`);
const maybe = haveChromium ? describe : describe.skip;

maybe('report in headless Chromium', () => {
  it('draws every chart with non-blank pixels and keeps a screenshot', async () => {
    const { chromium } = await import('playwright-core');
    const root = mkdtempSync(path.join(tmpdir(), 'ratchet-report-'));
    const run = path.join(root, 'runs', 'demo');
    mkdirSync(run, { recursive: true });
    writeFileSync(path.join(run, 'metrics.jsonl'), syntheticStepRecords(100).map((r) => JSON.stringify(r)).join('\n') + '\n');
    for (const e of syntheticEvalResults('demo', [0, 25, 50, 75, 100])) {
      mkdirSync(path.join(run, 'evals', String(e.policy_version)), { recursive: true });
      writeFileSync(path.join(run, 'evals', String(e.policy_version), `${e.taskset.hash}.json`), JSON.stringify(e));
    }
    const out = await generateReport('demo', { artifactsRoot: root, now: new Date('2025-01-02T00:00:00Z') });

    const userDataDir = mkdtempSync(path.join(tmpdir(), 'ratchet-chromium-'));
    const ctx = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM, headless: true, viewport: { width: 1400, height: 900 },
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync'],
    });
    try {
      const page = await ctx.newPage();
      const errors: string[] = [];
      const requests: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      page.on('request', (r) => { if (!r.url().startsWith('file:')) requests.push(r.url()); });
      await page.goto(`file://${out.file}`);
      await page.waitForFunction(() => document.body.dataset.rendered === 'true', null, { timeout: 20_000 });
      expect(errors).toEqual([]);
      expect(requests).toEqual([]); // self-contained: nothing fetched from anywhere
      const canvases = await page.evaluate(() => Array.from(document.querySelectorAll('canvas')).map((cv) => {
        const ctx2d = (cv as HTMLCanvasElement).getContext('2d')!;
        const { data } = ctx2d.getImageData(0, 0, cv.width, cv.height);
        let painted = 0;
        for (let i = 3; i < data.length; i += 4) if (data[i]! > 0) painted++;
        return { id: cv.id, painted, total: cv.width * cv.height };
      }));
      expect(canvases.map((cv) => cv.id).sort()).toEqual(['chart-components', 'chart-eval-0', 'chart-phases', 'chart-reward', 'chart-shell', 'chart-staleness', 'chart-throughput', 'chart-tools']);
      for (const cv of canvases) expect({ id: cv.id, blank: cv.painted < cv.total * 0.005 }).toEqual({ id: cv.id, blank: false });
      const shotDir = path.join(paths.home(), 'test-artifacts');
      mkdirSync(shotDir, { recursive: true });
      await page.screenshot({ path: path.join(shotDir, 'report.png'), fullPage: true });
      console.warn(`report screenshot: ${path.join(shotDir, 'report.png')}`);
    } finally {
      await ctx.close();
      rmSync(userDataDir, { recursive: true, force: true });
    }
  });
});
