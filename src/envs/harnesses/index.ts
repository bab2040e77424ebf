import * as path from 'node:path';
import { paths } from '../../shared/paths';
import { codeRepair } from '../code-repair';
import type { Environment } from '../types';

/** Seconds a harness may run per episode by default; `[[env]].args.harness_timeout_s` overrides it. */
const DEFAULT_TIMEOUT_S = 900;

const python = (venv: string) => path.join(paths.venv(venv), 'bin', 'python');

/**
 * Code repair (seed 004) with Nano itself as the agent: PyPI nano-agent 5.0.0, unchanged, in
 * .ratchet/venvs/harness-nano (infra/harness-env.sh), its execution environment implemented against
 * the rollout's sandbox (harness/ratchet_harness/nano_runner.py). Same tasks, tests and rubric as
 * code-repair; the answer is the work tree's diff.
 */
export const nano: Environment = {
  ...codeRepair,
  id: 'nano',
  // Nano brings its own system prompt; the task is its user message.
  userPrompt: (task) => `Repository: ${task.repo}\n\nIssue:\n${task.problem_statement}\n\nFix the bug.`,
  demonstration: [],
  harness: { name: 'nano', command: [python('harness-nano'), '-m', 'ratchet_harness.nano_runner'], timeout_s: DEFAULT_TIMEOUT_S },
};

/**
 * Code repair with mini-swe-agent 2.4.6 (PyPI, unchanged; .ratchet/venvs/harness-mini-swe-agent) as
 * the agent: its default agent and tool-calling model, its environment interface implemented against
 * the sandbox (harness/ratchet_harness/mswea_runner.py). An episode without a submission
 * (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`) ends with no final answer (stop_reason "error").
 */
export const miniSweAgent: Environment = {
  ...codeRepair,
  id: 'mini-swe-agent',
  userPrompt: (task) => `Repository: ${task.repo}\n\n${task.problem_statement}`,
  demonstration: [],
  harness: { name: 'mini-swe-agent', command: [python('harness-mini-swe-agent'), '-m', 'ratchet_harness.mswea_runner'], timeout_s: DEFAULT_TIMEOUT_S },
};
