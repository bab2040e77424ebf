/**
 * The cost ledger (docs/operations.md, "What a run costs and budgets"): the figures a step
 * costs, their sum over a run, and which budget a sum has reached. Pure and zod-free, so
 * workflow code imports it, and the config's [budget] section is keyed by it; the stored shapes
 * (CostFigures, CostBudgets) are in src/contracts/records.ts.
 */

/** Every figure of the ledger, a number that only grows. A budget `max_<key>` bounds the run's sum. */
export const COST_KEYS = [
  /** Sandbox containers the step's rollouts acquired (episode and test-run sandboxes). */
  'sandbox_containers',
  /** Docker's State.FinishedAt − State.StartedAt over those containers (warm-pool idle time included). */
  'sandbox_container_s',
  /** CPU-seconds their cgroups used. */
  'sandbox_cpu_s',
  /** Process CPU-seconds of the trainer's trainer.step (rank 0's process). */
  'trainer_cpu_s',
  /** Wall seconds of trainer.step on a CUDA device (0 on a CPU trainer). */
  'trainer_gpu_s',
  /** Completion tokens the policy generated over the step's rollouts. */
  'tokens_generated',
  /** Tokens the trainer trained on (loss-mask tokens of the batch). */
  'tokens_trained',
  /** Events TrainRun's own history grew by over the step (workflow tasks, activities, timers, children: not the children's own histories). */
  'temporal_events',
  /** Events of the step's StepRollouts child and its rollout shards (each over its continue-as-new executions), read as each returns. */
  'temporal_child_events',
] as const;
export type CostKey = (typeof COST_KEYS)[number];

export type Cost = Record<CostKey, number>;
export type Budgets = Partial<Record<CostKey, number>>;

export function zeroCost(): Cost {
  return Object.fromEntries(COST_KEYS.map((k) => [k, 0])) as Cost;
}

/** a + b, key by key (a missing key counts 0: records from before a figure existed). */
export function addCost(a: Partial<Cost> | undefined, b: Partial<Cost> | undefined): Cost {
  const out = zeroCost();
  for (const k of COST_KEYS) out[k] = round3((a?.[k] ?? 0) + (b?.[k] ?? 0));
  return out;
}

/** The config's [budget] section (max_sandbox_cpu_s...) as the ledger's keys (sandbox_cpu_s...). */
export function budgetsOfSection(section: Partial<Record<string, number>> | undefined): Budgets {
  const out: Budgets = {};
  for (const k of COST_KEYS) {
    const v = section?.[`max_${k}`];
    if (v !== undefined) out[k] = v;
  }
  return out;
}

/** The budgets in effect: the config's [budget] with the run's `ratchet set` changes over it. */
export function budgetsOf(config: Budgets | undefined, overrides: Budgets | undefined): Budgets {
  return { ...(config ?? {}), ...(overrides ?? {}) };
}

/** The first budget the run's cost has reached (cost >= budget), with both figures; undefined when none. */
export function exhaustedBudget(cost: Partial<Cost>, budgets: Budgets): { key: CostKey; spent: number; budget: number } | undefined {
  for (const k of COST_KEYS) {
    const b = budgets[k];
    if (b !== undefined && (cost[k] ?? 0) >= b) return { key: k, spent: cost[k] ?? 0, budget: b };
  }
  return undefined;
}

export function hasBudgets(b: Budgets): boolean {
  return COST_KEYS.some((k) => b[k] !== undefined);
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
