import { codeRepair } from './code-repair';
import { debug } from './debug';
import { miniSweAgent, nano } from './harnesses';
import { sweGrep } from './swe-grep';
import type { Environment } from './types';

/** The environments that ship with Ratchet; others come from modules (src/envs/load.ts). */
export const ENVIRONMENTS: Record<'swe-grep' | 'code-repair' | 'debug' | 'nano' | 'mini-swe-agent', Environment> = {
  'swe-grep': sweGrep,
  'code-repair': codeRepair,
  debug,
  // External harnesses as the agent (src/harness/): Nano and mini-swe-agent, from PyPI, unchanged.
  nano,
  'mini-swe-agent': miniSweAgent,
};

export function getEnvironment(id: string): Environment {
  const env = (ENVIRONMENTS as Record<string, Environment>)[id];
  if (!env) throw new Error(`unknown environment "${id}"; known: ${Object.keys(ENVIRONMENTS).join(', ')} (set [[env]].id in the run config, or env.module for your own)`);
  return env;
}
