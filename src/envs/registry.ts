import { codeRepair } from './code-repair';
import { debug } from './debug';
import { harbor } from './harbor';
import { miniSweAgent, nano } from './harnesses';
import { sweGrep } from './swe-grep';
import type { Environment } from './types';

/** The environments that ship with Ratchet; others come from modules (src/envs/load.ts). */
export const ENVIRONMENTS: Record<'swe-grep' | 'code-repair' | 'debug' | 'harbor' | 'nano' | 'mini-swe-agent', Environment> = {
  'swe-grep': sweGrep,
  'code-repair': codeRepair,
  debug,
  // Harbor task dirs (src/tasks/harbor.ts), scored by their own tests/test.sh.
  harbor,
  // External harnesses as the agent (src/harness/): Nano and mini-swe-agent, from PyPI, unchanged.
  nano,
  'mini-swe-agent': miniSweAgent,
};

export function getEnvironment(id: string): Environment {
  const env = (ENVIRONMENTS as Record<string, Environment>)[id];
  if (!env) throw new Error(`unknown environment "${id}"; known: ${Object.keys(ENVIRONMENTS).join(', ')} (set [[env]].id in the run config, or env.module for your own)`);
  return env;
}
