import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { runKeys } from '../artifacts/keys';
import type { ArtifactStore } from '../artifacts/store';
import { defaultStore } from '../artifacts/stores';
import { paths } from '../shared/paths';
import { buildReportData } from './aggregate';
import { renderReportHtml } from './html';
import { loadEvalResults, loadStepRecords, runDir } from './load';

export { RunDataError } from './load';

export interface ReportOutcome {
  file: string;
  bytes: number;
  steps: number;
  evals: number;
  /** Eval files that could not be read, with the reason (the report still renders). */
  skippedEvals: string[];
  ms: number;
}

/** Default report location: beside the run's data, so it travels with it. */
export function defaultReportPath(runId: string, artifactsRoot = paths.artifacts()): string {
  runDir(runId);
  return path.join(artifactsRoot, runKeys.report(runId));
}

/**
 * opts.store: the run's store (`ratchet report` finds it from --config or the run's memo);
 * opts.artifactsRoot: a local store directory (tests, benches); neither: the default store.
 */
export async function generateReport(runId: string, opts: {
  out?: string; artifactsRoot?: string; store?: ArtifactStore; now?: Date;
  /** Another run (same store) whose mean reward the reward chart draws beside this run's: a control run, say. */
  baseline?: string;
} = {}): Promise<ReportOutcome> {
  const t0 = performance.now();
  const root = opts.artifactsRoot ?? paths.artifacts();
  // Records and evals come through the store (s3:// or file://); the HTML is a local file.
  const store = opts.store ?? opts.artifactsRoot ?? defaultStore();
  const records = await loadStepRecords(runId, store);
  const { results, skipped } = await loadEvalResults(runId, store);
  const baseline = opts.baseline ? { runId: opts.baseline, records: await loadStepRecords(opts.baseline, store) } : undefined;
  const html = renderReportHtml(buildReportData(runId, records, results, opts.now, baseline));
  const file = path.resolve(opts.out ?? defaultReportPath(runId, root));
  await fs.mkdir(path.dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}`;
  await fs.writeFile(tmp, html);
  await fs.rename(tmp, file);
  return { file, bytes: Buffer.byteLength(html), steps: records.length, evals: results.length, skippedEvals: skipped, ms: performance.now() - t0 };
}
