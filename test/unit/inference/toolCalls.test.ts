/** Reading tool calls out of sampled text (Hermes <tool_call> blocks), as the agent loop does with what vLLM sampled. */
import { parseHermesToolCalls } from '../../../src/inference/toolCalls';

describe('parseHermesToolCalls', () => {
  const id = (i: number) => `c${i}`;
  test('text before the calls is the content; several calls; an unclosed last call', () => {
    const r = parseHermesToolCalls('I will run two.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {}}', id);
    expect(r.content).toBe('I will run two.\n');
    expect(r.tool_calls.map((c) => [c.id, c.function.name, c.function.arguments])).toEqual([['c0', 'a', '{"x": 1}'], ['c1', 'b', '{}']]);
  });
  test('a block with no named call in it leaves the whole reply as text', () => {
    for (const text of ['<tool_call>[1]</tool_call>', '<tool_call>\n"""\nclass A:\n  pass', '<tool_call>{"type": "function", "x": 1} and more']) {
      expect(parseHermesToolCalls(text, id)).toEqual({ content: text, tool_calls: [] });
    }
  });
  test('lenient where the call is plain: text after the call; arguments that do not parse are kept as written', () => {
    // Text after a complete call object (the loop runs the call).
    const after = parseHermesToolCalls('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}, "extra": [1, 2', id);
    expect(after.tool_calls.map((c) => [c.function.name, c.function.arguments])).toEqual([['bash', '{"command": "ls"}']]);
    // Broken arguments: the loop tells the model they are not valid JSON.
    const broken = parseHermesToolCalls('<tool_call>\n{"name": "result", "arguments": {"a.py", "b": "c"}}\n</tool_call>', id);
    expect(broken.tool_calls.map((c) => [c.function.name, c.function.arguments])).toEqual([['result', '{"a.py", "b": "c"}']]);
    // The call's own closing brace left out: the arguments still parse.
    const open = parseHermesToolCalls('<tool_call>\n{"name": "a", "arguments": {"x": 1}\n</tool_call>', id);
    expect(open.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([['a', { x: 1 }]]);
    // A brace inside a string does not end the object.
    const braces = parseHermesToolCalls('<tool_call>{"name": "bash", "arguments": {"command": "echo }"}} trailing', id);
    expect(braces.tool_calls[0]!.function.arguments).toBe('{"command": "echo }"}');
  });
  test('no call: all text', () => {
    expect(parseHermesToolCalls('just prose', id)).toEqual({ content: 'just prose', tool_calls: [] });
  });
  test('arguments the model gave as a string stay that string', () => {
    expect(parseHermesToolCalls('<tool_call>{"name": "a", "arguments": "{\\"x\\": 2}"}</tool_call>', id).tool_calls[0]!.function.arguments).toBe('{"x": 2}');
  });
});
