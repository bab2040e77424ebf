/**
 * `ratchet report` and `ratchet eval` read a run where it lives: --config's [artifacts],
 * else the store the TrainRun recorded in its memo, else the default store. The report
 * here is written from a run whose records are only in its own file:// store, with
 * RATCHET_ARTIFACTS_URL pointing somewhere else.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { Client } from '@temporalio/client';
import { defaultStore, storeFor } from '../../../src/artifacts/stores';
import { runArtifacts } from '../../../src/cli/runStore';
import { CliError } from '../../../src/cli/exit';
import { generateReport } from '../../../src/report';
import { syntheticStepRecords } from '../../../src/report/synthetic';

const clientWithMemo = (memo: unknown) => ({ workflow: { getHandle: () => ({ describe: async () => ({ memo }) }) } }) as unknown as Client;
const noClient = async () => undefined;

describe('the store a CLI command reads a run from', () => {
  let tmp: string;
  const saved = process.env.RATCHET_ARTIFACTS_URL;

  beforeAll(() => {
    tmp = mkdtempSync(path.join(tmpdir(), 'ratchet-runstore-'));
    mkdirSync(path.join(tmp, 'elsewhere'));
    process.env.RATCHET_ARTIFACTS_URL = `file://${path.join(tmp, 'elsewhere')}`;
  });
  afterAll(() => {
    if (saved === undefined) delete process.env.RATCHET_ARTIFACTS_URL;
    else process.env.RATCHET_ARTIFACTS_URL = saved;
    rmSync(tmp, { recursive: true, force: true });
  });

  /** smoke.toml with an [artifacts] section pointing at `url`. */
  function configWithStore(url: string): string {
    const file = path.join(tmp, `run-${Math.random().toString(36).slice(2)}.toml`);
    writeFileSync(file, `${readFileSync('configs/swe-grep/smoke.toml', 'utf8')}\n[artifacts]\nurl = "${url}"\n`);
    return file;
  }

  it('--config: the file\'s [artifacts], without asking Temporal', async () => {
    const client = jest.fn();
    await expect(runArtifacts('r1', { config: configWithStore('s3://bucket/prefix'), client })).resolves.toMatchObject({ url: 's3://bucket/prefix' });
    expect(client).not.toHaveBeenCalled();
  });

  it('a bad --config names the flag, the key and the problem', async () => {
    const err = await runArtifacts('r1', { config: configWithStore('http://not-a-store'), client: noClient }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CliError);
    expect((err as Error).message).toMatch(/--config: .*artifacts\.url.*s3:\/\/bucket\/prefix/s);
  });

  it('no --config: the run\'s memo; no memo or no server: the default store', async () => {
    const artifacts = { url: 's3://bucket/prefix', endpoint: 'http://minio:9000' };
    await expect(runArtifacts('r1', { client: async () => clientWithMemo({ artifacts }) })).resolves.toEqual(artifacts);
    await expect(runArtifacts('r1', { client: async () => clientWithMemo({}) })).resolves.toBeUndefined();
    await expect(runArtifacts('r1', { client: noClient })).resolves.toBeUndefined();
  });

  it('the report reads the records from the run\'s store, not RATCHET_ARTIFACTS_URL', async () => {
    const runStore = path.join(tmp, 'run-store');
    mkdirSync(path.join(runStore, 'runs', 'far'), { recursive: true });
    writeFileSync(path.join(runStore, 'runs', 'far', 'metrics.jsonl'), syntheticStepRecords(7).map((r) => JSON.stringify(r)).join('\n') + '\n');
    const settings = await runArtifacts('far', { config: configWithStore(`file://${runStore}`), client: noClient });
    const out = path.join(tmp, 'far.html');
    const r = await generateReport('far', { out, store: storeFor(settings, defaultStore()) });
    expect(r.steps).toBe(7);
    expect(readFileSync(out, 'utf8')).toContain('far');
    // The default store does not hold the run: without the run's settings it is not found.
    await expect(generateReport('far', { out, store: defaultStore() })).rejects.toThrow(/run "far" not found/);
  });
});
