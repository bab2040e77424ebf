/**
 * infra/lib.sh's machine cache of venvs (venv_to_cache, venv_from_cache) and of directories such as the converted
 * model (machine_cache_put_dir, machine_cached_dir): what a fresh clone's set-up links or copies instead of
 * installing or converting again. Run in bash against real venvs (python -m venv, no pip: nothing is downloaded); a
 * script in bin/ stands for pip's console scripts, which name their interpreter by absolute path.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

const lib = path.join(__dirname, '../../../infra/lib.sh');
let dir: string;
beforeEach(() => { dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-venv-cache-')); });
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `script` in bash with lib.sh sourced, RATCHET_HOME = dir/<home> and the machine cache in dir/cache. */
function sh(home: string, script: string) {
  const r = spawnSync('bash', ['-c', `source '${lib}'; ${script}`], {
    encoding: 'utf8',
    env: { ...process.env, RATCHET_HOME: path.join(dir, home), RATCHET_MACHINE_CACHE: path.join(dir, 'cache') },
  });
  return { status: r.status, out: r.stdout.trim(), err: r.stderr };
}

/** A venv at <home>/venvs/tool with bin/where, a script that prints the prefix of the python it runs on. */
function buildVenv(home: string) {
  const venv = path.join(dir, home, 'venvs/tool');
  expect(sh(home, `"$PYTHON" -m venv --without-pip '${venv}'`).status).toBe(0);
  writeFileSync(path.join(venv, 'bin/where'), `#!${venv}/bin/python\nimport sys\nprint(sys.prefix)\n`, { mode: 0o755 });
  return venv;
}

describe('venv machine cache (infra/lib.sh)', () => {
  test('a venv cached by one clone is linked into another, its scripts naming the new place; the cached copy is untouched', () => {
    const first = buildVenv('a');
    expect(sh('a', 'venv_to_cache tool k1').status).toBe(0);

    const r = sh('b', 'venv_from_cache tool k1 && echo hit');
    expect(r.out).toBe('hit');
    const second = path.join(dir, 'b/venvs/tool');
    const where = spawnSync(path.join(second, 'bin/where'), { encoding: 'utf8' });
    expect(where.stdout.trim()).toBe(second);
    // The script was rewritten into a file of its own; the cache's still names where it was built.
    const cached = path.join(dir, 'cache/venvs/tool/k1/tree');
    expect(readFileSync(path.join(cached, 'bin/where'), 'utf8')).toContain(`#!${first}/bin/python`);
    expect(statSync(path.join(second, 'bin/where')).ino).not.toBe(statSync(path.join(cached, 'bin/where')).ino);
    // Everything else is a hard link, not a copy.
    expect(statSync(path.join(second, 'pyvenv.cfg')).ino).toBe(statSync(path.join(cached, 'pyvenv.cfg')).ino);
  });

  test('another key is a miss and leaves the clone\'s venv alone; caching a new key drops the old one', () => {
    buildVenv('a');
    sh('a', 'venv_to_cache tool k1');
    const second = buildVenv('b');
    expect(sh('b', 'venv_from_cache tool k2 && echo hit || echo miss').out).toBe('miss');
    expect(statSync(path.join(second, 'bin/where')).isFile()).toBe(true);

    expect(sh('b', 'venv_to_cache tool k2').status).toBe(0);
    expect(sh('c', 'venv_from_cache tool k1 && echo hit || echo miss').out).toBe('miss');
    expect(sh('c', 'venv_from_cache tool k2 && echo hit || echo miss').out).toBe('hit');
  });

  test('venv_key follows the interpreter: the same recipe under another python is another key', () => {
    const a = sh('a', 'venv_key abc').out;
    expect(a).toMatch(/^[0-9a-f]{16}$/);
    expect(sh('a', 'venv_key abc').out).toBe(a);
    expect(sh('a', 'venv_key abd').out).not.toBe(a);
    writeFileSync(path.join(dir, 'fakepy'), '#!/bin/sh\necho /opt/other/python 3.99.0\n', { mode: 0o755 });
    expect(sh('a', `PYTHON='${path.join(dir, 'fakepy')}' venv_key abc`).out).not.toBe(a);
  });

  test('a directory cached by one clone is copied into another (its own files, not links); a new hash replaces the old', () => {
    const model = path.join(dir, 'a/models/m');
    expect(sh('a', `mkdir -p '${model}' && printf w > '${model}/model.safetensors' && machine_cache_put_dir m h1 '${model}'`).status).toBe(0);
    const copy = path.join(dir, 'b/models/m');
    expect(sh('b', `machine_cached_dir m h1 '${copy}' && echo hit`).out).toBe('hit');
    expect(readFileSync(path.join(copy, 'model.safetensors'), 'utf8')).toBe('w');
    expect(statSync(path.join(copy, 'model.safetensors')).ino).not.toBe(statSync(path.join(dir, 'cache/m/h1/dir/model.safetensors')).ino);
    expect(sh('b', `machine_cached_dir m h2 '${copy}' && echo hit || echo miss`).out).toBe('miss');
    expect(sh('a', `machine_cache_put_dir m h2 '${model}'`).status).toBe(0);
    expect(sh('c', `machine_cached_dir m h1 '${path.join(dir, 'c/m')}' && echo hit || echo miss`).out).toBe('miss');
  });
});
