import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { dockerfileFacts, harborTaskDirs, ratchetDockerfile, readHarborTask } from '../../../src/tasks/harbor';

function taskDir(files: Record<string, string>): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'harbor-'));
  for (const [rel, content] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), content);
  }
  return dir;
}

const full = {
  'task.toml': '[task]\nname = "org/fix-calc"\n[verifier]\ntimeout_sec = 120.0\n[agent]\ntimeout_sec = 300.0\n',
  'instruction.md': 'Fix calc.\n',
  'environment/Dockerfile': 'FROM base:1 AS build\nRUN true\nFROM ratchet-sandbox:latest\nCOPY --from=build /x /x\nWORKDIR /app\n',
  'tests/test.sh': '#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n',
  'tests/data/expected.txt': '5\n',
};

describe('Harbor task dirs', () => {
  test('reads the config, instruction, tests and what the Dockerfile needs', async () => {
    const spec = await readHarborTask(taskDir(full));
    expect(spec).toMatchObject({ name: 'org/fix-calc', instruction: 'Fix calc.\n', baseImages: ['base:1', 'ratchet-sandbox:latest'], workdir: '/app' });
    expect(spec.info).toMatchObject({ verifier_timeout_s: 120, agent_timeout_s: 300, workdir: '/app' });
    expect(Object.keys(spec.info.tests).sort()).toEqual(['data/expected.txt', 'test.sh']);
    const df = ratchetDockerfile(spec);
    expect(df).toContain("ln -sfn /work/repo '/app'");
    expect(df).toContain('ln -sfn /tmp/harbor/logs /logs');
  });

  test.each([
    ['task.toml', /task\.toml is missing/],
    ['instruction.md', /instruction\.md is missing/],
    ['environment/Dockerfile', /environment\/Dockerfile is missing/],
    ['tests/test.sh', /tests\/test\.sh is missing/],
  ])('names a missing %s', async (drop, msg) => {
    const files: Record<string, string> = { ...full };
    delete files[drop];
    await expect(readHarborTask(taskDir(files))).rejects.toThrow(msg);
  });

  test('a prebuilt registry image, a multi-step task, bad TOML, a work dir under /work are refused with the fix', async () => {
    const noDockerfile: Record<string, string> = { ...full };
    delete noDockerfile['environment/Dockerfile'];
    await expect(readHarborTask(taskDir({ ...noDockerfile, 'task.toml': '[environment]\ndocker_image = "ghcr.io/x/y:1"\n' }))).rejects.toThrow(/prebuilt image ghcr\.io\/x\/y:1.*none is reachable.*Fix:/);
    await expect(readHarborTask(taskDir({ ...full, 'task.toml': '[[steps]]\nname = "a"\n' }))).rejects.toThrow(/multi-step/);
    await expect(readHarborTask(taskDir({ ...full, 'task.toml': 'not = = toml' }))).rejects.toThrow(/not valid TOML/);
    await expect(readHarborTask(taskDir({ ...full, 'environment/Dockerfile': 'FROM x\nWORKDIR /work/app\n' }))).rejects.toThrow(/work dir \/work\/app/);
  });

  test('a dataset is its sub-directories with task.toml; an empty one says what it expects', async () => {
    const root = mkdtempSync(path.join(os.tmpdir(), 'harbor-ds-'));
    for (const n of ['b', 'a']) for (const [rel, c] of Object.entries(full)) { mkdirSync(path.dirname(path.join(root, n, rel)), { recursive: true }); writeFileSync(path.join(root, n, rel), c); }
    mkdirSync(path.join(root, 'not-a-task'));
    expect((await harborTaskDirs(root)).map((d) => path.basename(d))).toEqual(['a', 'b']);
    await expect(harborTaskDirs(mkdtempSync(path.join(os.tmpdir(), 'empty-')))).rejects.toThrow(/no task\.toml/);
  });

  test('dockerfileFacts: stage aliases are not images; line continuations; relative WORKDIR', () => {
    expect(dockerfileFacts('FROM a AS b\nFROM b\nFROM scratch\nWORKDIR /x\nWORKDIR y \\\n\n')).toEqual({ baseImages: ['a'], workdir: '/x/y' });
  });
});
