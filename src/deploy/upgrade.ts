/**
 * `ratchet upgrade`: make a build the current version of Ratchet's worker deployment
 * (Temporal Worker Versioning, docs/upgrades.md). New runs start on it; each running
 * TrainRun stays pinned to its build until its next step boundary, then continues as
 * new onto it. Not workflow code.
 */
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';

export interface DeploymentState {
  /** "<deployment>.<build id>" of the current version, or undefined (unversioned workers get the tasks). */
  current?: string;
  /** Versions the server knows, with their drainage ("draining": pinned runs still on it; "drained": none). */
  versions: { version: string; status: string; drainage?: string }[];
}

const enums = temporal.api.enums.v1;

/** The gRPC client decodes enums as numbers: name them by the proto's own table (a name passes through). */
const enumName = (table: Record<number, string>, v: unknown, prefix: string): string =>
  String((typeof v === 'number' ? table[v] : v) ?? '').replace(prefix, '').toLowerCase() || 'unspecified';

export async function describeDeployment(client: Client, deploymentName: string): Promise<DeploymentState> {
  const res = await client.workflowService.describeWorkerDeployment({ namespace: client.options.namespace, deploymentName });
  const info = res.workerDeploymentInfo;
  const cur = info?.routingConfig?.currentDeploymentVersion;
  return {
    current: cur?.buildId ? `${cur.deploymentName}.${cur.buildId}` : undefined,
    versions: (info?.versionSummaries ?? []).map((v) => {
      const status = enumName(enums.WorkerDeploymentVersionStatus, v.status, 'WORKER_DEPLOYMENT_VERSION_STATUS_');
      // The drainage check's result when it has one; else the version status, which says draining/drained too.
      const drainage = v.drainageInfo?.status
        ? enumName(enums.VersionDrainageStatus, v.drainageInfo.status, 'VERSION_DRAINAGE_STATUS_')
        : ['draining', 'drained'].includes(status) ? status : undefined;
      return {
        version: v.deploymentVersion ? `${v.deploymentVersion.deploymentName}.${v.deploymentVersion.buildId}` : String(v.version),
        status,
        ...(drainage ? { drainage } : {}),
      };
    }),
  };
}

/**
 * Sets `buildId` current for `deploymentName`. The version exists once one of its workers has polled:
 * until then the server answers NotFound/FailedPrecondition, and this waits up to `waitMs` for it.
 */
export async function setCurrentBuild(
  client: Client, deploymentName: string, buildId: string, opts: { identity?: string; waitMs?: number; pollMs?: number } = {},
): Promise<void> {
  const deadline = Date.now() + (opts.waitMs ?? 30_000);
  for (;;) {
    try {
      await client.workflowService.setWorkerDeploymentCurrentVersion({
        namespace: client.options.namespace, deploymentName, buildId, identity: opts.identity ?? client.options.identity,
        // Refuse to make current a build with no poller on a queue the current one has (a typo, or workers not started).
        ignoreMissingTaskQueues: false,
      });
      return;
    } catch (err) {
      const msg = (err as Error).message ?? String(err);
      if (Date.now() > deadline || !/not found|does not exist|no.*poller|FAILED_PRECONDITION|not yet/i.test(msg)) {
        throw new Error(`could not make ${deploymentName}.${buildId} current: ${msg}. Fix: start the new build's workers (RATCHET_WORKER_VERSIONING=on RATCHET_BUILD_ID=${buildId}) and wait until they poll`);
      }
      await new Promise((r) => setTimeout(r, opts.pollMs ?? 500));
    }
  }
}
