import { z } from 'zod';
import { defineTool, type Tool } from '../../agent/tool';
import { shellTool } from '../shell';
import { DEMO_ISSUE, DEMO_REPO, demonstration } from '../demonstration';
import type { Environment } from '../types';
import { sweGrepEvalMetrics, sweGrepRubric } from './rewards';

/** The answer tool; `describeArgs: false` sends its arguments without descriptions. */
function resultTool(description: string, describeArgs: boolean): Tool {
  const files = z.array(z.string()).min(1);
  const functions = z.array(z.string()).optional();
  return defineTool({
    name: 'result',
    description,
    args: z.object({
      files: describeArgs ? files.describe('File paths relative to the repository root') : files,
      functions: describeArgs ? functions.describe('Function names, e.g. "module.py::func"') : functions,
    }),
    async run(args) {
      return { content: 'Answer recorded.', answer: { files: args.files, functions: args.functions ?? [] } };
    },
  });
}

/** Code localization (seed 001): search the repository with bash, answer with the files to change. */
export const sweGrep: Environment = {
  id: 'swe-grep',
  systemPrompt: [
    'You are a code search agent. A bug is described below; find the source files that must change to fix it.',
    'Use the `bash` tool to search the repository (rg, grep, find, sed -n, ls). The repository is your working directory.',
    'When you know the answer, call the `result` tool with the file paths (relative to the repository root) and, if you can, the function names.',
    'Do not fix the bug. Be brief.',
  ].join('\n'),
  userPrompt: (task) => `Repository: ${task.repo}\n\nIssue:\n${task.problem_statement}\n\nFind the files that must change.`,
  demonstration: demonstration(`Repository: ${DEMO_REPO}\n\nIssue:\n${DEMO_ISSUE}\n\nFind the files that must change.`, [
    { tool: 'bash', args: { command: 'rg -n "def add" --type py' }, output: 'calc/ops.py:4:def add(a, b):\n\n[exit code 0]' },
    { tool: 'result', args: { files: ['calc/ops.py'], functions: ['calc/ops.py::add'] }, output: 'Answer recorded.' },
  ]),
  tools: [
    shellTool('bash', 'Run a bash command in the repository root and see its output.'),
    resultTool('Submit your answer: the files (and optionally functions) that must change. Ends the episode.', true),
  ],
  prompts: {
    // The tool schemas without the argument descriptions and with shorter tool descriptions: 208 -> 153
    // SmolLM2 tokens in every prompt (issue 38: the main job's shared prompt is most of what its trainer
    // processes). The system prompt stays: a 51-token rewording of it cut SmolLM2-135M's probability of
    // starting a valid first tool call from 0.23 to 0.05 on the main job's tasks; these schemas: 0.24 (BENCHMARKS.md).
    compact: {
      tools: [
        shellTool('bash', 'Run a bash command in the repository.', { commandDescription: false }),
        resultTool('Answer: the files (and functions) that must change. Ends the episode.', false),
      ],
    },
  },
  async finalize(_ctx, answer) {
    return answer ?? { files: [], functions: [] };
  },
  needsTests: false,
  rubric: sweGrepRubric,
  evalMetrics: sweGrepEvalMetrics,
};
