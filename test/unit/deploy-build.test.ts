/** Build ids and the main worker's deployment options (src/deploy/build.ts, docs/upgrades.md). */
import { buildIdOf, checkBuildId, mainWorkerDeployment, versioningOn, workerBuild } from '../../src/deploy/build';
import { buildProgram } from '../../src/cli';

describe('worker build', () => {
  test('the default build id is the package version and the git sha', () => {
    expect(buildIdOf()).toMatch(/^\d+-\d+-\d+\+([0-9a-f]{12}(-dirty)?|nogit)$/);
  });

  test('RATCHET_BUILD_ID and RATCHET_DEPLOYMENT_NAME override; a bad value is named with its fix', () => {
    expect(workerBuild({ RATCHET_BUILD_ID: 'b2', RATCHET_DEPLOYMENT_NAME: 'prod' })).toEqual({ deploymentName: 'prod', buildId: 'b2' });
    expect(() => checkBuildId('0.6.0')).toThrow(/RATCHET_BUILD_ID="0.6.0" is not a valid build id.*without dots/);
    expect(() => workerBuild({ RATCHET_DEPLOYMENT_NAME: 'a.b' })).toThrow(/RATCHET_DEPLOYMENT_NAME="a.b"/);
  });

  test('versioning is off unless asked for; on, every workflow is pinned to this build', () => {
    expect(versioningOn({})).toBe(false);
    expect(mainWorkerDeployment({})).toBeUndefined();
    expect(() => versioningOn({ RATCHET_WORKER_VERSIONING: 'maybe' })).toThrow(/must be on or off/);
    expect(mainWorkerDeployment({ RATCHET_WORKER_VERSIONING: 'on', RATCHET_BUILD_ID: 'b1' })).toEqual({
      version: { deploymentName: 'ratchet', buildId: 'b1' }, useWorkerVersioning: true, defaultVersioningBehavior: 'PINNED',
    });
  });

  test('`ratchet upgrade` is a command', () => {
    expect(buildProgram().commands.map((c) => c.name())).toContain('upgrade');
  });
});
