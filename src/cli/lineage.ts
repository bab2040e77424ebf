import type { Command } from 'commander';
import type { StepLineage } from '../contracts/records';
import { loadStepRecords, RunDataError } from '../report/load';
import { CliError, EXIT } from './exit';
import { c } from './term';

/** The lineage of one step as text: one line per fact, the task rows last. */
export function lineageText(step: number, l: StepLineage | undefined): string {
  if (!l) return `step ${step}: no lineage recorded (a step from before 0.6.0)`;
  const kv = (k: string, v: unknown) => `  ${k.padEnd(24)} ${typeof v === 'string' ? v : JSON.stringify(v)}`;
  const lines = [
    c.bold(`step ${step}`),
    kv('build', l.build ? `${l.build.deployment}.${l.build.build_id}` : '(unversioned worker)'),
    kv('config sha256', l.config_sha256),
    kv('model', l.model),
    kv('sandbox image', l.sandbox_image ?? '(the stack\'s default image)'),
    ...(l.sandbox_image_digests?.length
      ? l.sandbox_image_digests.map((d, i) => kv(`sandbox image id[${i}]`, d))
      : [kv('sandbox image id', '(not reported: a step from before 0.7)')]),
    ...(l.env_modules?.length
      ? l.env_modules.map((e) => kv(`env module[${e.id}]`, `version ${e.version}, sources sha256 ${e.sha256}`))
      : [kv('env modules', '(not reported: a step from before 0.7)')]),
    kv('sampling', l.sampling),
    ...l.envs.map((e, i) => kv(`env[${i}]`, e)),
    kv('rollout policy versions', l.rollout_policy_versions),
    kv('batch sha256', l.batch_sha256 ?? '(no batch: the step trained on nothing)'),
    kv('manifest sha256', l.manifest_sha256 ?? '-'),
    kv('trainer', l.trainer),
    kv('trainer code', l.trainer.code ? `ratchet-trainer ${l.trainer.code.version}, sources sha256 ${l.trainer.code.sha256}${l.trainer.code.torch ? `, torch ${l.trainer.code.torch}` : ''}${l.trainer.code.threads ? `, ${l.trainer.code.threads} threads` : ''}` : '(not reported: a trainer from before 0.7, or the step trained nothing)'),
    ...(l.tasks.files ?? []).map((f) => kv(`task file[${f.env}]`, `${f.path} sha256 ${f.sha256} (${f.bytes} bytes)`)),
    kv('task set', `${l.tasks.task_set_dir} (seed ${l.tasks.seed}, ${l.tasks.row_count ?? l.tasks.rows.length} rows)`),
    ...l.tasks.rows.map((r) => `    ${r.env}  ${r.instance_id}  ${c.dim(r.dataset)}`),
    ...((l.tasks.row_count ?? 0) > l.tasks.rows.length ? [c.dim(`    ... ${l.tasks.row_count! - l.tasks.rows.length} more (named in the step's trajectories)`)] : []),
  ];
  return lines.join('\n');
}

export function register(program: Command): void {
  program.command('lineage')
    .description('where a step came from: build, config, task rows, env and sampling settings, sandbox image ids, env module versions and sha256s, rollout policy versions, batch and checkpoints')
    .argument('<run>', 'run id')
    .argument('[step]', 'one step (default: every step)')
    .option('--json', 'the recorded lineage as JSON')
    .addHelpText('after', '\nExamples:\n  $ ratchet lineage smoke-1 3\n  $ ratchet lineage smoke-1 --json > lineage.json')
    .action(async (run: string, stepArg: string | undefined, o: { json?: boolean }) => {
      let records;
      try {
        records = await loadStepRecords(run);
      } catch (err) {
        if (err instanceof RunDataError) throw new CliError(err.message, err.kind === 'not-found' ? EXIT.notFound : EXIT.invalidInput);
        throw err;
      }
      if (stepArg !== undefined) {
        const n = Number(stepArg);
        records = records.filter((r) => r.step === n);
        if (!Number.isInteger(n) || !records.length) throw new CliError(`run ${run} has no recorded step ${stepArg}`, EXIT.notFound);
      }
      if (o.json) console.log(JSON.stringify(records.map((r) => ({ step: r.step, lineage: r.lineage ?? null })), null, 1));
      else console.log(records.map((r) => lineageText(r.step, r.lineage)).join('\n\n'));
    });
}
