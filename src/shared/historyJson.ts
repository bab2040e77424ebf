/**
 * Recorded histories are stored with protobufjs' toObject/fromObject of the SDK's
 * own @temporalio/proto, not the SDK's historyToJSON/historyFromJSON: in this
 * install those go through proto3-json-serializer with a second protobufjs
 * (7.x vs the SDK's 8.x) and fail with "type must be a Type".
 */
import { temporal } from '@temporalio/proto';

const History = temporal.api.history.v1.History;
const OPTIONS = { longs: String, enums: String, bytes: String } as const;

export function historyToObject(history: temporal.api.history.v1.IHistory): unknown {
  return History.toObject(History.fromObject(history), OPTIONS);
}

export function historyFromObject(json: unknown): temporal.api.history.v1.History {
  return History.fromObject(json as Record<string, unknown>);
}

/**
 * A recorded history file: the history and the workflow id it ran under. Replay needs the
 * id because workflow code derives child ids from it (OutageWait's `<id>-outage-...`); a
 * replay under another id is a false nondeterminism error. Files from before 0.4.0 hold
 * the bare history and replay under `fallbackId`.
 */
export interface RecordedHistory { workflowId: string; history: temporal.api.history.v1.History }

export function recordedHistoryToObject(workflowId: string, history: temporal.api.history.v1.IHistory): unknown {
  return { workflowId, history: historyToObject(history) };
}

export function recordedHistoryFromObject(json: unknown, fallbackId: string): RecordedHistory {
  const o = json as { workflowId?: unknown; history?: unknown; events?: unknown };
  if (typeof o.workflowId === 'string' && o.history !== undefined) return { workflowId: o.workflowId, history: historyFromObject(o.history) };
  return { workflowId: fallbackId, history: historyFromObject(json) };
}
