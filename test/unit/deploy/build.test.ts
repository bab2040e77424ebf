/** Build ids and the main worker's deployment options (src/deploy/build.ts, docs/upgrades.md). */
import { buildIdOf, checkBuildId, mainWorkerDeployment, versioningOn, workerBuild } from '../../../src/deploy/build';
import { buildProgram } from '../../../src/cli';
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { describeDeployment } from '../../../src/deploy/upgrade';

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

  test('`ratchet upgrade --show` names version status and drainage from what the server sends (enums decoded as numbers)', async () => {
    const E = temporal.api.enums.v1;
    const WDS = temporal.api.workflowservice.v1.DescribeWorkerDeploymentResponse;
    // Encoded and decoded as the gRPC client does it: enums arrive as numbers.
    const res = WDS.decode(WDS.encode(WDS.fromObject({
      workerDeploymentInfo: {
        routingConfig: { currentDeploymentVersion: { deploymentName: 'd', buildId: 'b' } },
        versionSummaries: [
          { deploymentVersion: { deploymentName: 'd', buildId: 'b' }, status: E.WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_CURRENT },
          { deploymentVersion: { deploymentName: 'd', buildId: 'a' }, status: E.WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINED,
            drainageInfo: { status: E.VersionDrainageStatus.VERSION_DRAINAGE_STATUS_DRAINED } },
          { deploymentVersion: { deploymentName: 'd', buildId: 'o' }, status: E.WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINING },
        ],
      },
    })).finish());
    expect(typeof res.workerDeploymentInfo?.versionSummaries?.[0]?.status).toBe('number');
    const client = { options: { namespace: 'ns' }, workflowService: { describeWorkerDeployment: async () => res } } as unknown as Client;
    expect(await describeDeployment(client, 'd')).toEqual({
      current: 'd.b',
      versions: [
        { version: 'd.b', status: 'current' },
        { version: 'd.a', status: 'drained', drainage: 'drained' },
        { version: 'd.o', status: 'draining', drainage: 'draining' },
      ],
    });
  });
});
