import { ConfigError, parseRunConfig } from '../../src/config/load';

describe('run config', () => {
  test('a minimal config gets every default', () => {
    const c = parseRunConfig('[[env]]\nid = "swe-grep"\n', 'x.toml');
    expect(c.orchestrator.batch_size).toBe(2);
    expect(c.trainer.lora.rank).toBe(8);
    expect(c.env[0]!.args.max_tool_calls).toBe(10);
  });

  test.each([
    ['unknown key', '[[env]]\nid = "swe-grep"\n[orchestrator]\nbatchsize = 4\n', /x\.toml: orchestrator: Unrecognized key\(s\) in object: 'batchsize'/],
    ['wrong type', '[[env]]\nid = "swe-grep"\n[orchestrator]\nbatch_size = "four"\n', /x\.toml: orchestrator\.batch_size: Expected number, received string/],
    ['unknown env', '[[env]]\nid = "chess"\n', /x\.toml: env\.0\.id: Invalid enum value/],
    ['no env', '[orchestrator]\nbatch_size = 4\n', /x\.toml: env: Required/],
    ['bad toml', '[[env]\nid = 1', /x\.toml: not valid TOML/],
    ['too much fan-out', '[[env]]\nid = "debug"\n[orchestrator]\nmax_concurrent_rollouts = 5000\n', /max_concurrent_rollouts: Number must be less than or equal to 1000/],
  ])('%s is named with its key', (_name, text, message) => {
    expect(() => parseRunConfig(text, 'x.toml')).toThrow(ConfigError);
    expect(() => parseRunConfig(text, 'x.toml')).toThrow(message);
  });
});
