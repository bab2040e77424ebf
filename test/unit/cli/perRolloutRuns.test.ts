/**
 * `ratchet upgrade` lists the running TrainRuns on the per-rollout fan-out (docs/upgrades.md): their stored
 * config, read from the run's store, says rollouts_per_chunk = 0 or has no such key.
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Client } from '@temporalio/client';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { openPerRolloutRuns, perRolloutReason } from '../../../src/cli/perRolloutRuns';

describe('perRolloutReason', () => {
  test('0 and a config stored before the key existed run per rollout; a chunk size or a config without [orchestrator] do not', () => {
    expect(perRolloutReason({ orchestrator: { rollouts_per_chunk: 0, batch_size: 2 } })).toBe('rollouts_per_chunk = 0');
    expect(perRolloutReason({ orchestrator: { batch_size: 2 } })).toBe('stored before 0.6 (no rollouts_per_chunk)');
    expect(perRolloutReason({ orchestrator: { rollouts_per_chunk: 16 } })).toBeUndefined();
    expect(perRolloutReason({ orchestrator: { rollouts_per_chunk: 1 } })).toBeUndefined();
    expect(perRolloutReason({})).toBeUndefined();
    expect(perRolloutReason(undefined)).toBeUndefined();
  });
});

describe('openPerRolloutRuns', () => {
  test('reads each running TrainRun\'s stored config from its store and names those on the per-rollout fan-out', async () => {
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-per-rollout-')));
    // Written as openRun stores them (runs/<run>/config.json), by hand: the reader must not depend on the writer.
    await store.put('runs/old-zero/config.json', Buffer.from(JSON.stringify({ name: 'a', orchestrator: { batch_size: 2, rollouts_per_chunk: 0 } })));
    await store.put('runs/chunked/config.json', Buffer.from(JSON.stringify({ name: 'b', orchestrator: { batch_size: 2, rollouts_per_chunk: 16 } })));
    await store.put('runs/pre-06/config.json', Buffer.from(JSON.stringify({ name: 'c', orchestrator: { batch_size: 2 } })));
    await store.put('runs/torn/config.json', Buffer.from('{"orchestrator": {'));
    const queries: string[] = [];
    const client = {
      workflow: {
        async *list({ query }: { query: string }) {
          queries.push(query);
          for (const workflowId of ['old-zero', 'chunked', 'pre-06', 'no-config', 'torn']) yield { workflowId };
        },
      },
    } as unknown as Client;

    const runs = await openPerRolloutRuns(client, async () => store);

    expect(runs).toEqual([
      { run: 'old-zero', why: 'rollouts_per_chunk = 0' },
      { run: 'pre-06', why: 'stored before 0.6 (no rollouts_per_chunk)' },
    ]);
    expect(queries).toEqual(["WorkflowType = 'TrainRun' AND ExecutionStatus = 'Running'"]);
  });
});
