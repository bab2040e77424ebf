/**
 * The name vLLM serves a run's policy version under. It carries the run id, so
 * runs that share an inference server never load, use or unload each other's
 * adapters. Pure: workflow code imports it.
 */
export function adapterName(runId: string, version: number): string {
  return `${runId}/policy-v${version}`;
}

/** The version of one of this run's adapter names, or undefined for any other name. */
export function adapterVersion(runId: string, name: string): number | undefined {
  const prefix = `${runId}/policy-v`;
  if (!name.startsWith(prefix)) return undefined;
  const rest = name.slice(prefix.length);
  return /^\d+$/.test(rest) ? Number(rest) : undefined;
}
