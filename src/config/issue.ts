/** One problem with a run config, found before anything starts (crossChecks.ts, fanoutChecks.ts). */
export interface ConfigIssue {
  /** Dotted key, e.g. "sampling.max_tokens" or "env.0.args.max_tool_calls". */
  key: string;
  message: string;
}
