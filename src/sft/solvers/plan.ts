import type { Completion, CompletionRequest, ModelClient } from '../../agent/model';
import { scriptedReply, scriptedToolCall } from './toolCall';

/** One tool call of a scripted demonstration. */
export interface PlannedCall {
  tool: string;
  args: Record<string, unknown>;
}

/**
 * A "policy" that plays a planned list of tool calls, one a turn, then answers `final` with no
 * tool call. Its place in the plan is the number of tool outputs in the conversation, so it is the
 * same whatever the loop retries. Its replies carry no token ids: SFT renders them with the
 * model's own chat template (src/sft/trajectories.ts).
 */
export function playPlan(plan: PlannedCall[], final: string): ModelClient {
  return {
    async complete(req: CompletionRequest): Promise<Completion> {
      const done = req.messages.filter((m) => m.role === 'tool').length;
      const step = plan[done];
      return step ? scriptedReply([scriptedToolCall(step.tool, step.args)]) : scriptedReply([], final);
    },
  };
}
