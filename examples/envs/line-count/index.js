// @ts-check
/**
 * line-count: an example Ratchet environment that lives outside src/.
 *
 * The agent gets a few text files in an empty sandbox (/work), may run shell
 * commands, and answers how many lines one of them has. It shows every part of
 * the declarative interface (docs/environments.md): a dataset of its own
 * (data/train.jsonl), a setup hook, tools with zod schemas, an answer tool, and
 * a rubric of weighted reward functions. It needs nothing from Ratchet but zod.
 */
// CommonJS, so Node loads it as is, with no build step.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { z } = require('zod');

const WORK = '/work';

/** @param {{ exitCode: number | null, stdout: string, stderr: string, timedOut: boolean, truncated: boolean }} r */
function observation(r) {
  const parts = [];
  if (r.stdout) parts.push(r.stdout.trimEnd());
  if (r.stderr) parts.push(`[stderr]\n${r.stderr.trimEnd()}`);
  if (r.truncated) parts.push('[output truncated]');
  if (r.timedOut) parts.push('[timed out]');
  parts.push(`[exit code ${r.exitCode ?? 'none'}]`);
  return parts.join('\n');
}

/** The answer the agent gave, as a number, or undefined. */
function answerOf(/** @type {{ final: Record<string, unknown> }} */ input) {
  const n = input.final.lines;
  return typeof n === 'number' && Number.isFinite(n) ? n : undefined;
}

const environment = {
  id: 'line-count',
  systemPrompt: [
    'You are a careful assistant with a shell. Files are in your working directory.',
    'Use the `bash` tool to look at them (ls, wc -l, cat), then call `answer` with the number of lines.',
  ].join('\n'),
  /** @param {{ problem_statement: string }} task */
  userPrompt: (task) => task.problem_statement,
  // No repository: each task writes its own files in setup().
  needsRepository: false,
  /** @param {{ sandbox: { writeFile(p: string, c: string): Promise<void> }, task: Record<string, unknown> }} ctx */
  async setup(ctx) {
    const files = /** @type {Record<string, string>} */ (ctx.task.files ?? {});
    for (const [name, content] of Object.entries(files)) await ctx.sandbox.writeFile(`${WORK}/${name}`, content);
  },
  demonstration: [
    { role: 'user', content: 'How many lines does todo.txt have?' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'demo_0', type: 'function', function: { name: 'bash', arguments: JSON.stringify({ command: 'wc -l todo.txt' }) } }] },
    { role: 'tool', tool_call_id: 'demo_0', name: 'bash', content: '3 todo.txt\n[exit code 0]' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'demo_1', type: 'function', function: { name: 'answer', arguments: JSON.stringify({ lines: 3 }) } }] },
    { role: 'tool', tool_call_id: 'demo_1', name: 'answer', content: 'Answer recorded.' },
  ],
  tools: [
    {
      name: 'bash',
      description: 'Run a bash command in the working directory and see its output.',
      args: z.object({ command: z.string().min(1).describe('A bash command') }),
      /** @param {{ command: string }} args @param {any} ctx */
      async run({ command }, ctx) {
        const r = await ctx.sandbox.exec(command, { cwd: WORK, timeoutMs: ctx.execTimeoutMs });
        return { content: observation(r), command, error: r.timedOut };
      },
    },
    {
      name: 'answer',
      description: 'Submit the number of lines. Ends the episode.',
      args: z.object({ lines: z.number().int().min(0).describe('The number of lines') }),
      /** @param {{ lines: number }} args */
      async run({ lines }) {
        return { content: 'Answer recorded.', answer: { lines } };
      },
    },
  ],
  rubric: [
    /** 1 for the exact count. */
    { name: 'correct', weight: 1.0, fn: (/** @type {any} */ i) => (answerOf(i) === i.task.expected_lines ? 1 : 0) },
    /** Partial credit that falls off with the distance: a gradient before the first exact answer. */
    {
      name: 'closeness', weight: 0.3,
      fn: (/** @type {any} */ i) => {
        const a = answerOf(i);
        return a === undefined ? 0 : 1 / (1 + Math.abs(a - Number(i.task.expected_lines)));
      },
    },
    /** Answering at all, through the answer tool. */
    { name: 'answered', weight: 0.1, fn: (/** @type {any} */ i) => (i.answered ? 1 : 0) },
    /** Reported only: how many tool calls the episode took. */
    { name: 'tool_calls', weight: 0, fn: (/** @type {any} */ i) => i.stats.tool_calls },
  ],
};

module.exports = { environment };
