import { ApplicationFailure } from '@temporalio/common';
import type { Client } from '@temporalio/client';
import type { EvalSweepInput } from '../contracts/eval';
import { loadEvalTaskset } from '../evals/tasksets';
import { runKeys } from '../artifacts/keys';
import type { StoreSettings } from '../artifacts/settings';
import { defaultStore, storeFor } from '../artifacts/stores';
import { CliError, EXIT } from './exit';
import { runArtifacts } from './runStore';

export interface EvalFlags {
  run: string;
  versions?: string;
  newest?: string;
  taskset: string;
  k: string;
  force?: boolean;
  concurrency?: string;
  /** The run's config file: its [artifacts] section says where the run lives. */
  config?: string;
}

const posInt = (flag: string, v: string): number => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new CliError(`${flag} must be a positive integer (got "${v}")`, EXIT.usage);
  return n;
};

/** Checks flags, the run and the task set here, so a bad schedule is refused before it exists. */
export async function evalInputFromFlags(client: Client, f: EvalFlags): Promise<EvalSweepInput> {
  if (!/^[A-Za-z0-9._-]+$/.test(f.run)) throw new CliError(`--run "${f.run}": use letters, digits, ".", "_" and "-" only`, EXIT.usage);
  const input: EvalSweepInput = { runId: f.run, taskset: f.taskset, k: posInt('--k', f.k), force: Boolean(f.force) };
  if (f.versions) {
    input.versions = f.versions.split(',').map((v) => {
      const n = Number(v.trim().replace(/^v/, ''));
      if (!Number.isInteger(n) || n < 0) throw new CliError(`--versions: "${v}" is not a policy version (use e.g. 0,3,5)`, EXIT.usage);
      return n;
    });
  } else {
    input.newest = posInt('--newest', f.newest ?? '1');
  }
  if (f.concurrency) input.maxConcurrent = posInt('--concurrency', f.concurrency);
  // The run's store: from --config's [artifacts], else from the TrainRun's memo. Neither: the workers' default store.
  const artifacts = await runArtifacts(f.run, { config: f.config, client: async () => client });
  if (artifacts) input.artifacts = artifacts;
  await assertRunExists(client, f.run, input.artifacts);
  try {
    await loadEvalTaskset(f.taskset);
  } catch (err) {
    if (err instanceof ApplicationFailure) {
      throw new CliError(err.message, err.type === 'TaskSetNotFound' ? EXIT.notFound : EXIT.invalidInput);
    }
    throw err;
  }
  return input;
}

/** A run exists once its TrainRun stored its config in the artifact store. */
export async function assertRunExists(client: Client, run: string, artifacts?: StoreSettings): Promise<void> {
  const store = storeFor(artifacts, defaultStore());
  const where = `${store.url}/${runKeys.config(run)}`;
  if (await store.exists(runKeys.config(run))) return;
  let workflowExists = false;
  try {
    await client.workflow.getHandle(run).describe();
    workflowExists = true;
  } catch { /* not found: reported below */ }
  throw new CliError(workflowExists
    ? `run "${run}" has a workflow but no stored config yet (${where}); it has not started its first step. Fix: wait for it, or check its worker logs.`
    : `run "${run}" not found: no workflow with that id and no ${where}. Fix: list runs with \`ratchet status\`; ` +
      (artifacts ? 'check the [artifacts] url/endpoint of the --config file.' : 'if the run keeps its artifacts elsewhere (s3://), pass its config: --config <run.toml>.'),
  workflowExists ? EXIT.notReady : EXIT.notFound);
}

export { recordedArtifacts } from './runStore';
