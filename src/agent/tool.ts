import { z } from 'zod';
import type { ToolSpec } from '../rollouts/trajectory';
import type { Task } from '../tasks/schema';
import type { Sandbox } from '../envs/sandbox';

/** What a tool sees: the episode's sandbox and task, and env state shared across its tools. */
export interface ToolContext {
  sandbox: Sandbox;
  task: Task;
  /** Per-episode mutable state owned by the environment (e.g. a debugger session). */
  state: Record<string, unknown>;
  execTimeoutMs: number;
  signal?: AbortSignal;
}

export interface ToolOutcome {
  /** The observation sent back to the model. */
  content: string;
  /** A failure the model caused (bad path, patch that does not apply): counted as a tool error. */
  error?: boolean;
  /** Set by an answer tool: the episode ends with this as the environment's final answer. */
  answer?: Record<string, unknown>;
  /** The shell command run, for the usage chart. */
  command?: string;
}

/** A tool: a typed function whose JSON schema is derived from its zod args. */
export interface Tool<A extends z.AnyZodObject = z.AnyZodObject> {
  name: string;
  description: string;
  args: A;
  run(args: z.infer<A>, ctx: ToolContext): Promise<ToolOutcome>;
}

export function defineTool<A extends z.AnyZodObject>(tool: Tool<A>): Tool {
  return tool as unknown as Tool;
}

export function toolSpec(tool: Tool): ToolSpec {
  return {
    type: 'function',
    function: { name: tool.name, description: tool.description, parameters: zodToJsonSchema(tool.args) },
  };
}

/** The small subset of JSON Schema our tool arguments use: objects of strings, numbers, booleans, arrays. */
export function zodToJsonSchema(schema: z.ZodTypeAny): Record<string, unknown> {
  const description = schema.description;
  const withDesc = (s: Record<string, unknown>) => (description ? { ...s, description } : s);
  if (schema instanceof z.ZodOptional || schema instanceof z.ZodNullable) return withDesc(zodToJsonSchema(schema.unwrap() as z.ZodTypeAny));
  if (schema instanceof z.ZodDefault) return withDesc(zodToJsonSchema(schema._def.innerType as z.ZodTypeAny));
  if (schema instanceof z.ZodEffects) return withDesc(zodToJsonSchema(schema.innerType() as z.ZodTypeAny));
  if (schema instanceof z.ZodString) return withDesc({ type: 'string' });
  if (schema instanceof z.ZodNumber) return withDesc({ type: schema.isInt ? 'integer' : 'number' });
  if (schema instanceof z.ZodBoolean) return withDesc({ type: 'boolean' });
  if (schema instanceof z.ZodEnum) return withDesc({ type: 'string', enum: schema.options as string[] });
  if (schema instanceof z.ZodArray) return withDesc({ type: 'array', items: zodToJsonSchema(schema.element as z.ZodTypeAny) });
  if (schema instanceof z.ZodObject) {
    const shape = schema.shape as Record<string, z.ZodTypeAny>;
    const properties: Record<string, unknown> = {};
    const required: string[] = [];
    for (const [key, value] of Object.entries(shape)) {
      properties[key] = zodToJsonSchema(value);
      if (!value.isOptional()) required.push(key);
    }
    return withDesc({ type: 'object', properties, required });
  }
  throw new Error(`zodToJsonSchema: unsupported zod type ${schema.constructor.name} in a tool's args; use strings, numbers, booleans, enums, arrays or objects`);
}
