/**
 * Where a step's time goes, read from the timestamps of its executions' histories
 * (TrainRun, StepRollouts, each shard run): consecutive events of one kind are folded
 * into one line with their time span, and the latencies that make up the critical path
 * (workflow task schedule-to-start and start-to-complete, activity schedule-to-start,
 * child start) are summarised. Bench-only (`npm run bench:orchestration -- --profile`).
 */
import type { Client } from '@temporalio/client';
import type { temporal } from '@temporalio/proto';

type Event = temporal.api.history.v1.IHistoryEvent;

const ms = (t: Event['eventTime']): number => Number(t?.seconds ?? 0) * 1000 + Math.floor((t?.nanos ?? 0) / 1e6);

/** Every event of one execution (small pages: a big step's history exceeds one message). */
export async function historyOf(client: Client, workflowId: string, runId?: string): Promise<Event[]> {
  const out: Event[] = [];
  let nextPageToken: Uint8Array | undefined;
  do {
    const page = await client.workflowService.getWorkflowExecutionHistory({
      namespace: client.options.namespace, execution: { workflowId, runId }, maximumPageSize: 500, nextPageToken,
    });
    out.push(...(page.history?.events ?? []));
    nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
  } while (nextPageToken);
  return out;
}

function pct(xs: number[], p: number): number {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
}

/** Folds an execution's history into lines `+t0..+t1 n x Kind(detail)` relative to `origin`, and its latency figures. */
export function timeline(events: Event[], origin: number, eventTypes: Record<number, string>): { lines: string[]; stats: string[] } {
  const scheduledType = new Map<number, string>();
  const lines: string[] = [];
  let cur: { key: string; n: number; t0: number; t1: number } | undefined;
  const flush = () => { if (cur) lines.push(`  +${cur.t0.toFixed(0).padStart(6)}..+${cur.t1.toFixed(0).padStart(6)} ms  ${String(cur.n).padStart(4)} x ${cur.key}`); };
  const wftSched = new Map<number, number>();
  const wftStarted = new Map<number, number>();
  const wftQueue: number[] = [];
  const wftRun: number[] = [];
  const actSched = new Map<number, number>();
  const actQueue = new Map<string, number[]>();
  const actRun = new Map<string, number[]>();
  const actStart = new Map<number, number>();
  const childInit: number[] = [];
  const span = new Map<string, { firstStart: number; lastEnd: number }>();
  const childStartLat: number[] = [];
  for (const e of events) {
    const t = ms(e.eventTime) - origin;
    // Event types arrive as enum numbers: named back through the proto's enum.
    const kind = (eventTypes[Number(e.eventType)] ?? String(e.eventType)).replace(/^EVENT_TYPE_/, '');
    let detail = '';
    const id = Number(e.eventId);
    if (e.activityTaskScheduledEventAttributes) {
      detail = e.activityTaskScheduledEventAttributes.activityType?.name ?? '';
      scheduledType.set(id, detail);
      actSched.set(id, t);
    } else if (e.activityTaskStartedEventAttributes) {
      const sid = Number(e.activityTaskStartedEventAttributes.scheduledEventId);
      detail = scheduledType.get(sid) ?? '';
      actStart.set(sid, t);
      (actQueue.get(detail) ?? actQueue.set(detail, []).get(detail)!).push(t - (actSched.get(sid) ?? t));
      const sp = span.get(detail) ?? span.set(detail, { firstStart: t, lastEnd: t }).get(detail)!;
      sp.firstStart = Math.min(sp.firstStart, t);
    } else if (e.activityTaskCompletedEventAttributes) {
      const sid = Number(e.activityTaskCompletedEventAttributes.scheduledEventId);
      detail = scheduledType.get(sid) ?? '';
      (actRun.get(detail) ?? actRun.set(detail, []).get(detail)!).push(t - (actStart.get(sid) ?? t));
      const sp = span.get(detail);
      if (sp) sp.lastEnd = Math.max(sp.lastEnd, t);
    } else if (e.workflowTaskScheduledEventAttributes) {
      wftSched.set(id, t);
    } else if (e.workflowTaskStartedEventAttributes) {
      const sid = Number(e.workflowTaskStartedEventAttributes.scheduledEventId);
      wftStarted.set(id, t);
      wftQueue.push(t - (wftSched.get(sid) ?? t));
    } else if (e.workflowTaskCompletedEventAttributes) {
      const sid = Number(e.workflowTaskCompletedEventAttributes.startedEventId);
      wftRun.push(t - (wftStarted.get(sid) ?? t));
    } else if (e.startChildWorkflowExecutionInitiatedEventAttributes) {
      detail = e.startChildWorkflowExecutionInitiatedEventAttributes.workflowType?.name ?? '';
      childInit.push(t);
    } else if (e.childWorkflowExecutionStartedEventAttributes) {
      detail = e.childWorkflowExecutionStartedEventAttributes.workflowType?.name ?? '';
      const init = childInit[childStartLat.length];
      if (init !== undefined) childStartLat.push(t - init);
    } else if (e.childWorkflowExecutionCompletedEventAttributes) {
      detail = e.childWorkflowExecutionCompletedEventAttributes.workflowType?.name ?? '';
    } else if (e.workflowTaskFailedEventAttributes) {
      detail = `cause ${e.workflowTaskFailedEventAttributes.cause}: ${(e.workflowTaskFailedEventAttributes.failure?.message ?? '').slice(0, 120)}`;
    } else if (e.workflowTaskTimedOutEventAttributes) {
      detail = `timeout ${e.workflowTaskTimedOutEventAttributes.timeoutType}`;
    } else if (e.workflowExecutionSignaledEventAttributes) {
      detail = e.workflowExecutionSignaledEventAttributes.signalName ?? '';
    }
    const key = detail ? `${kind}(${detail})` : kind;
    if (cur && cur.key === key) { cur.n++; cur.t1 = t; } else { flush(); cur = { key, n: 1, t0: t, t1: t }; }
  }
  flush();
  const f = (xs: number[]) => `n ${xs.length}, p50 ${pct(xs, 0.5).toFixed(0)}, p90 ${pct(xs, 0.9).toFixed(0)}, max ${pct(xs, 1).toFixed(0)}, sum ${xs.reduce((a, b) => a + b, 0).toFixed(0)}`;
  const stats = [
    `  workflow task schedule-to-start (ms): ${f(wftQueue)}`,
    `  workflow task start-to-complete (ms): ${f(wftRun)}`,
    ...[...actQueue].map(([k, v]) => `  activity ${k} schedule-to-start (ms): ${f(v)}`),
    ...[...actRun].map(([k, v]) => `  activity ${k} start-to-close (ms): ${f(v)}`),
    ...[...span].filter(([k]) => (actRun.get(k)?.length ?? 0) > 1).map(([k, v]) => `  activity ${k}: first started +${v.firstStart}, last completed +${v.lastEnd} ms`),
    ...(childStartLat.length ? [`  child start initiated-to-started (ms): ${f(childStartLat)}`] : []),
  ];
  return { lines, stats };
}

/** Prints the timelines of the given executions (id, optional run id), relative to the first event of the first. */
export async function printTimelines(client: Client, executions: { workflowId: string; runId?: string }[], maxLines = 80): Promise<void> {
  const { temporal: proto } = await import('@temporalio/proto');
  const names = proto.api.enums.v1.EventType as unknown as Record<string, number>;
  const eventTypes: Record<number, string> = {};
  for (const [k, v] of Object.entries(names)) if (typeof v === 'number') eventTypes[v] = k;
  let origin: number | undefined;
  for (const x of executions) {
    const events = await historyOf(client, x.workflowId, x.runId);
    origin ??= ms(events[0]?.eventTime);
    const { lines, stats } = timeline(events, origin, eventTypes);
    console.log(`\n${x.workflowId}${x.runId ? ` (${x.runId.slice(0, 8)})` : ''}: ${events.length} events`);
    const shown = lines.length > maxLines ? [...lines.slice(0, maxLines / 2), `  ... ${lines.length - maxLines} lines ...`, ...lines.slice(-maxLines / 2)] : lines;
    for (const l of shown) console.log(l);
    for (const s of stats) console.log(s);
  }
}
