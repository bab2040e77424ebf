import type { ChatMessage } from '../contracts/trajectory';

/**
 * A worked example episode, placed between the system prompt and the task
 * (env arg `few_shot = true`). Small models rarely call tools unprompted; one
 * demonstration of the tool-call format on a made-up repository lifts the
 * share of episodes that act at all, which is what gives a group of rollouts
 * different rewards (and so a gradient) early in training. Its tokens are part
 * of the prompt, so they are never trained on.
 */
export interface DemoStep {
  tool: string;
  args: Record<string, unknown>;
  output: string;
}

export function demonstration(userPrompt: string, steps: DemoStep[], closing?: string): ChatMessage[] {
  const messages: ChatMessage[] = [{ role: 'user', content: userPrompt }];
  steps.forEach((s, i) => {
    const id = `demo_${i}`;
    messages.push({ role: 'assistant', content: '', tool_calls: [{ id, type: 'function', function: { name: s.tool, arguments: JSON.stringify(s.args) } }] });
    messages.push({ role: 'tool', tool_call_id: id, name: s.tool, content: s.output });
  });
  if (closing !== undefined) messages.push({ role: 'assistant', content: closing });
  return messages;
}

/** The made-up repository every demonstration works on. */
export const DEMO_REPO = 'example/calc';
export const DEMO_ISSUE = '`calc.ops.add(2, 3)` returns -1 instead of 5.';
