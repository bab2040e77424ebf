/**
 * One trainer config, read by two languages: the run config's [trainer] section
 * (src/config/schema.ts) and the Python trainer's trainer_config
 * (trainer/ratchet_trainer/core/config.py) must have the same keys, nesting,
 * defaults and choices. This test reads both and fails on any difference, so a
 * key added on one side only (or a default changed on one side) is caught here.
 *
 * It is generic: it walks the zod schema and asks Python for its schema(), so new
 * keys are compared without touching this file. Python's CONTEXT_KEYS are the keys
 * that other sections fill (src/workflows/trainerConfig.ts) and are not in [trainer].
 */
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { z } from 'zod';
import { parseRunConfig } from '../../../src/config/load';
import { TrainerConfig } from '../../../src/config/schema';
import { toTrainerConfig } from '../../../src/workflows/trainerConfig';
import { describeWithStack, REPO, STATE } from '../../helpers/stack';

type Tree = Record<string, unknown>;

/** Every key of a zod object with its default (null when it has none), nested; string enums' values into `choices`. */
function describeObject(schema: z.AnyZodObject, prefix: string, choices: Record<string, string[]>): Tree {
  const out: Tree = {};
  for (const [key, field] of Object.entries(schema.shape)) {
    const dotted = prefix ? `${prefix}.${key}` : key;
    let t = field as z.ZodTypeAny;
    let value: unknown = null;
    let seenDefault = false;
    for (;;) {
      if (t instanceof z.ZodDefault) {
        if (!seenDefault) value = t._def.defaultValue();
        seenDefault = true;
        t = t._def.innerType;
      } else if (t instanceof z.ZodOptional || t instanceof z.ZodNullable) {
        t = t.unwrap();
      } else if (t instanceof z.ZodEffects) {
        t = t.innerType();
      } else {
        break;
      }
    }
    if (t instanceof z.ZodObject) {
      out[key] = describeObject(t, dotted, choices); // a section's defaults are its keys' defaults
      continue;
    }
    if (t instanceof z.ZodEnum) choices[dotted] = [...(t.options as string[])];
    out[key] = value;
  }
  return out;
}

/** {"a.b": leaf}; arrays are leaves. */
function flatten(tree: unknown, prefix = ''): Record<string, unknown> {
  if (tree === null || typeof tree !== 'object' || Array.isArray(tree)) return { [prefix]: tree };
  return Object.assign({}, ...Object.entries(tree as Tree).map(([k, v]) => flatten(v, prefix ? `${prefix}.${k}` : k)));
}

/** One line per difference, naming the key: what a reader of a failure needs. */
function differences(ts: Tree, py: Tree, what: string, [nameA, nameB] = ['TypeScript', 'Python']): string[] {
  const a = flatten(ts);
  const b = flatten(py);
  const out: string[] = [];
  for (const k of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) {
    if (!(k in b)) out.push(`${what} ${k}: only in ${nameA} (${JSON.stringify(a[k])})`);
    else if (!(k in a)) out.push(`${what} ${k}: only in ${nameB} (${JSON.stringify(b[k])})`);
    else if (JSON.stringify(a[k]) !== JSON.stringify(b[k])) out.push(`${what} ${k}: ${nameA} ${JSON.stringify(a[k])}, ${nameB} ${JSON.stringify(b[k])}`);
  }
  return out;
}

function withoutKeys(tree: Tree, dotted: string[]): Tree {
  const copy = JSON.parse(JSON.stringify(tree)) as Tree;
  for (const key of dotted) {
    const parts = key.split('.');
    let node: Tree | undefined = copy;
    for (const p of parts.slice(0, -1)) node = node?.[p] as Tree | undefined;
    if (node) delete node[parts[parts.length - 1]!];
  }
  return copy;
}

interface PythonSide {
  schema: { defaults: Tree; choices: Record<string, string[]>; context_keys: string[] };
  parsed: Tree;
  stderr: string;
}

/**
 * The trainer venv's Python reads config.py alone: it imports only the standard library
 * (the GPU box has no pydantic), so the test skips the package's torch import.
 */
function askPython(payload: unknown): PythonSide {
  const script = [
    'import importlib.util, json, sys',
    'spec = importlib.util.spec_from_file_location("trainer_config", sys.argv[1])',
    'm = importlib.util.module_from_spec(spec); sys.modules["trainer_config"] = m; spec.loader.exec_module(m)',
    'print(json.dumps({"schema": m.schema(), "parsed": m.parse_trainer_config(json.loads(sys.argv[2])).to_dict()}))',
  ].join('\n');
  const r = spawnSync(path.join(STATE, 'venvs', 'trainer', 'bin', 'python'),
    ['-c', script, path.join(REPO, 'trainer', 'ratchet_trainer', 'core', 'config.py'), JSON.stringify(payload)],
    { encoding: 'utf8', timeout: 120_000 });
  if (r.status !== 0) throw new Error(`python failed (${r.status ?? r.signal}): ${r.stderr}`);
  return { ...(JSON.parse(r.stdout) as Omit<PythonSide, 'stderr'>), stderr: r.stderr };
}

describeWithStack('one trainer config: [trainer] in TypeScript = trainer_config in Python', ['trainerVenv'], () => {
  const config = parseRunConfig('[[env]]\nid = "swe-grep"\n', 'x.toml');
  const payload = toTrainerConfig(config);
  let py: PythonSide;
  beforeAll(() => {
    py = askPython(payload);
  });

  test('the same keys, nesting and defaults', () => {
    const choices: Record<string, string[]> = {};
    const ts = describeObject(TrainerConfig, '', choices);
    expect(differences(ts, withoutKeys(py.schema.defaults, py.schema.context_keys), 'default of')).toEqual([]);
  });

  test('the same choices for every string key', () => {
    const choices: Record<string, string[]> = {};
    describeObject(TrainerConfig, '', choices);
    const sorted = (c: Record<string, string[]>) => Object.fromEntries(Object.entries(c).map(([k, v]) => [k, [...v].sort()]));
    expect(differences(sorted(choices), sorted(py.schema.choices), 'choices of')).toEqual([]);
  });

  test('what a default run sends parses to the trainer\'s defaults, in no deprecated spelling', () => {
    // The keys the workflow adds are exactly the trainer's context keys (model.config: tests and benchmarks only).
    const added = Object.keys(flatten(payload)).filter((k) => !(k in flatten(config.trainer))).sort();
    expect(added).toEqual(py.schema.context_keys.filter((k) => k !== 'model.config').sort());
    const expected = JSON.parse(JSON.stringify(py.schema.defaults)) as { model: Tree; loss: Tree } & Tree;
    expected.model.path = config.model.path;
    expected.loss.temperature = config.sampling.temperature;
    expected.seq_len = config.orchestrator.seq_len;
    expect(differences(py.parsed, expected, 'payload key', ['the trainer parsed', 'its default is'])).toEqual([]);
    expect(py.stderr).not.toMatch(/deprecated/);
  });
});
