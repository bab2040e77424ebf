/**
 * Which build of Ratchet this process is, for Temporal Worker Versioning
 * (docs/upgrades.md): the worker deployment it belongs to and its build id.
 * Not workflow code: workflows read their build from workflowInfo().
 *
 *   RATCHET_WORKER_VERSIONING  on|off (default off: the local one-host stack stays unversioned)
 *   RATCHET_DEPLOYMENT_NAME    the deployment (default "ratchet")
 *   RATCHET_BUILD_ID           the build id (default <package version>+<git sha>, "+dirty" if the tree has changes)
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { WorkerDeploymentVersion } from '@temporalio/common';
import { REPO_ROOT } from '../shared/paths';

export const DEFAULT_DEPLOYMENT = 'ratchet';

/** Build ids Temporal accepts: no '.' (the canonical form is "<deployment>.<build id>"), at most 255 bytes. */
export function checkBuildId(id: string, key = 'RATCHET_BUILD_ID'): string {
  if (!id || id.length > 255 || /[.\s]/.test(id)) {
    throw new Error(`${key}="${id}" is not a valid build id: use 1-255 characters without dots or spaces (e.g. 0-6-0+abc1234). Fix: set ${key}, or unset it to use <version>+<git sha>`);
  }
  return id;
}

/** The build id of the code at `root`: package version (dots as dashes) + short git sha, or "+nogit". */
export function buildIdOf(root: string = REPO_ROOT): string {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string };
  const version = pkg.version.replace(/\./g, '-');
  let sha = 'nogit';
  try {
    sha = execFileSync('git', ['-C', root, 'rev-parse', '--short=12', 'HEAD'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const dirty = execFileSync('git', ['-C', root, 'status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    if (dirty) sha += '-dirty';
  } catch {
    // Not a git checkout (a release tarball, a container image): the version alone, unless RATCHET_BUILD_ID says more.
  }
  return `${version}+${sha}`;
}

/** This process's deployment version, from the environment (see the file comment). */
export function workerBuild(env: NodeJS.ProcessEnv = process.env): WorkerDeploymentVersion {
  const deploymentName = env.RATCHET_DEPLOYMENT_NAME || DEFAULT_DEPLOYMENT;
  if (/[.\s]/.test(deploymentName)) {
    throw new Error(`RATCHET_DEPLOYMENT_NAME="${deploymentName}" may not contain dots or spaces. Fix: e.g. RATCHET_DEPLOYMENT_NAME=ratchet`);
  }
  return { deploymentName, buildId: checkBuildId(env.RATCHET_BUILD_ID || buildIdOf()) };
}

/** Whether workers register with Worker Versioning (RATCHET_WORKER_VERSIONING=on). */
export function versioningOn(env: NodeJS.ProcessEnv = process.env): boolean {
  const v = (env.RATCHET_WORKER_VERSIONING ?? 'off').toLowerCase();
  if (!['on', 'off', '1', '0', 'true', 'false'].includes(v)) {
    throw new Error(`RATCHET_WORKER_VERSIONING="${env.RATCHET_WORKER_VERSIONING}" must be on or off`);
  }
  return ['on', '1', 'true'].includes(v);
}

/**
 * The main worker's deployment options: every workflow it runs is PINNED to its build
 * (TrainRun moves to a newer build only by continue-as-new at a step boundary), or
 * undefined when versioning is off.
 */
export function mainWorkerDeployment(env: NodeJS.ProcessEnv = process.env) {
  if (!versioningOn(env)) return undefined;
  return { version: workerBuild(env), useWorkerVersioning: true as const, defaultVersioningBehavior: 'PINNED' as const };
}

/**
 * The rollout worker's deployment options: the same deployment and build id as the main worker of its
 * build, so a run pinned to a build sends its rollouts to that build's rollout workers only (its
 * step manifests and rollout inputs may carry settings older builds do not know; docs/upgrades.md).
 * The worker runs no workflows: its default behaviour never applies.
 */
export function rolloutWorkerDeployment(env: NodeJS.ProcessEnv = process.env) {
  return mainWorkerDeployment(env);
}
