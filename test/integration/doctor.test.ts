import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { runDoctor } from '../../src/stack/doctor';
import { describeWithStack, REPO } from '../helpers/stack';

/** `ratchet doctor` against the real stack: every component passes, and a broken one names its fix. */
describeWithStack('ratchet doctor (real stack)', ['temporalServer', 'docker', 'inference', 'model', 'trainerVenv'], () => {
  test('every check passes on the running stack', async () => {
    const results = await runDoctor();
    expect(results.map((r) => r.component)).toEqual(['temporal', 'docker', 'inference', 'tool-calls+tokens', 'lora', 'trainer-env']);
    for (const r of results) expect({ component: r.component, ok: r.ok, detail: r.detail }).toEqual({ component: r.component, ok: true, detail: r.detail });
    expect(results.find((r) => r.component === 'tool-calls+tokens')!.detail).toMatch(/^tool call bash\(\{"command":/);
    expect(results.find((r) => r.component === 'lora')!.detail).toBe('runtime LoRA load and unload work');
  }, 180_000);

  test('components that cannot be reached fail with the command that fixes them', async () => {
    const results = await runDoctor({ temporalAddress: '127.0.0.1:1', inferenceUrl: 'http://127.0.0.1:1/v1' });
    const byName = Object.fromEntries(results.map((r) => [r.component, r]));
    expect(byName.temporal!.ok).toBe(false);
    expect(byName.temporal!.fix).toMatch(/temporal\.sh start|ratchet up/);
    expect(byName.inference!.ok).toBe(false);
    expect(byName.inference!.fix).toMatch(/inference\.sh start/);
    expect(byName['tool-calls+tokens']!.ok).toBe(false);
    expect(byName.docker!.ok).toBe(true); // the others are untouched
  }, 120_000);

  test('the CLI prints one line per component and exits 0 when all pass', () => {
    const out = execFileSync(path.join(REPO, 'bin', 'ratchet'), ['doctor'], { encoding: 'utf8', timeout: 180_000 });
    const lines = out.trim().split('\n').filter((l) => /^(ok|FAIL)\s/.test(l));
    expect(lines).toHaveLength(6);
    expect(lines.every((l) => l.startsWith('ok'))).toBe(true);
  }, 200_000);
});
