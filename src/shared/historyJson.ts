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
