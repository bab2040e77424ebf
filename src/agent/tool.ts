import { z } from 'zod';
import type { ToolSpec } from '../contracts/trajectory';
import type { Task } from '../tasks/schema';
import type { Sandbox } from '../sandbox/interface';

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

/**
 * The small subset of JSON Schema our tool arguments use: objects of strings,
 * numbers, booleans, arrays. Types are told apart by zod's own type name, not
 * instanceof, so tools of an environment module that brings its own copy of
 * zod convert the same way.
 */
export function zodToJsonSchema(schema: z.ZodTypeAny): Record<string, unknown> {
  const description = schema.description;
  const withDesc = (s: Record<string, unknown>) => (description ? { ...s, description } : s);
  const def = schema._def as { typeName?: string; innerType?: z.ZodTypeAny; schema?: z.ZodTypeAny; values?: string[]; type?: z.ZodTypeAny; checks?: { kind: string }[] };
  switch (def.typeName) {
    case 'ZodOptional':
    case 'ZodNullable':
    case 'ZodDefault':
      return withDesc(zodToJsonSchema(def.innerType!));
    case 'ZodEffects':
      return withDesc(zodToJsonSchema(def.schema!));
    case 'ZodString':
      return withDesc({ type: 'string' });
    case 'ZodNumber':
      return withDesc({ type: (def.checks ?? []).some((c) => c.kind === 'int') ? 'integer' : 'number' });
    case 'ZodBoolean':
      return withDesc({ type: 'boolean' });
    case 'ZodEnum':
      return withDesc({ type: 'string', enum: def.values! });
    case 'ZodArray':
      return withDesc({ type: 'array', items: zodToJsonSchema(def.type!) });
    case 'ZodObject': {
      const shape = (schema as z.AnyZodObject).shape as Record<string, z.ZodTypeAny>;
      const properties: Record<string, unknown> = {};
      const required: string[] = [];
      for (const [key, value] of Object.entries(shape)) {
        properties[key] = zodToJsonSchema(value);
        if (!value.isOptional()) required.push(key);
      }
      return withDesc({ type: 'object', properties, required });
    }
    default:
      throw new Error(`zodToJsonSchema: unsupported zod type ${def.typeName ?? schema.constructor.name} in a tool's args; use strings, numbers, booleans, enums, arrays or objects`);
  }
}
