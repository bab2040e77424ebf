import type { Command } from 'commander';
import { DEFAULT_DEPLOYMENT, buildIdOf, checkBuildId } from '../deploy/build';
import { describeDeployment, setCurrentBuild } from '../deploy/upgrade';
import { CliError, EXIT } from './exit';
import { openPerRolloutRuns } from './perRolloutRuns';
import { connectClient, type TemporalOptions } from './temporal';
import { c } from './term';

interface UpgradeOptions extends TemporalOptions {
  buildId?: string;
  deployment?: string;
  show?: boolean;
}

/** `ratchet upgrade`: the safe upgrade of docs/upgrades.md, one command. */
export async function upgrade(o: UpgradeOptions): Promise<void> {
  const deployment = o.deployment ?? process.env.RATCHET_DEPLOYMENT_NAME ?? DEFAULT_DEPLOYMENT;
  const { client, close } = await connectClient(o);
  try {
    // Versioned, they move at a step boundary; an in-place upgrade to a build without their path cannot replay them.
    const perRollout = await openPerRolloutRuns(client);
    if (perRollout.length) {
      console.log(c.yellow(`${perRollout.length} running run(s) on the per-rollout fan-out: `) + perRollout.map((r) => `${r.run} (${r.why})`).join(', '));
      console.log('  a worker build without that fan-out cannot replay them in place (an unversioned upgrade, or a fix deployed under the same build id). ' +
        'Fix: let them finish, or terminate them (temporal workflow terminate --workflow-id <run>) and `ratchet restart` each on the new build: ' +
        'it resumes from its last completed step, in chunks. See docs/upgrades.md');
    }
    if (!o.show) {
      const buildId = checkBuildId(o.buildId ?? process.env.RATCHET_BUILD_ID ?? buildIdOf(), '--build-id');
      try {
        await setCurrentBuild(client, deployment, buildId, { identity: `ratchet-cli@${process.env.USER ?? 'unknown'}` });
      } catch (err) {
        throw new CliError((err as Error).message, EXIT.notReady);
      }
      console.log(`${c.bold(`${deployment}.${buildId}`)} is current: new runs start on it; running runs move to it at their next step boundary`);
    }
    const state = await describeDeployment(client, deployment);
    console.log(`deployment ${c.bold(deployment)}: current ${state.current ?? '(none: unversioned workers)'}`);
    for (const v of state.versions) {
      const retire = v.drainage === 'drained' ? c.green('  (drained: its workers can stop)') : v.drainage === 'draining' ? '  (draining: runs still pinned to it; keep its workers)' : '';
      console.log(`  ${v.version}  ${v.status}${retire}`);
    }
  } finally {
    await close();
  }
}

export function register(program: Command): void {
  program.command('upgrade')
    .description('make a worker build current (Worker Versioning): new runs start on it, running runs move to it at their next step boundary')
    .option('--build-id <id>', 'the build to make current (default: RATCHET_BUILD_ID, or this checkout\'s <version>+<git sha>)')
    .option('--deployment <name>', 'the worker deployment (default: RATCHET_DEPLOYMENT_NAME, or "ratchet")')
    .option('--show', 'only show the deployment\'s versions, which can be retired, and the running runs on the per-rollout fan-out')
    .addHelpText('after', '\nStart the new build\'s workers first (RATCHET_WORKER_VERSIONING=on), then:\n  $ ratchet upgrade --build-id 0-6-1+abc1234\n  $ ratchet upgrade --show   # when the old build is drained, stop its workers\nSee docs/upgrades.md.')
    .action((_o, cmd: Command) => upgrade(cmd.optsWithGlobals()));
}
