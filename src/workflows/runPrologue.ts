/**
 * How TrainRun and SftRun open a run (workflow code): the run's control (status, queries,
 * signals, updates) installed first, then the config, from the stored copy on a resume or
 * validated, stored and hashed by openRun on a first start, with where to start from.
 * One home for both, so the two kinds of run open and resume alike.
 */
import { workflowInfo, type ActivityInterfaceFor } from '@temporalio/workflow';
import type { LoadedConfig, ResumeState, TrainRunInput } from '../contracts/run';
import { LIGHT, type LightActivities } from './proxies';
import { RunControl } from './runControl';
import { patientActivities } from './storeWait';

export interface OpenedRun {
  run: RunControl;
  /** Light activities that wait out a down store or a full disk (storeWait.ts). */
  patient: ActivityInterfaceFor<LightActivities>;
  loaded: LoadedConfig;
  /** Where to start: the input's on a continue-as-new, openRun's (a restart's last completed step) otherwise. */
  resume: ResumeState | undefined;
}

export async function openRunPrologue(input: TrainRunInput): Promise<OpenedRun> {
  const runId = input.runId ?? workflowInfo().workflowId;
  const run = new RunControl(runId);
  run.outageLimits = input.outageWaits;
  const patient = patientActivities<LightActivities>(run, LIGHT);
  run.step = input.resume?.nextStep ?? 0;
  run.policyVersion = input.resume?.policyVersion ?? 0;
  run.installHandlers();

  if (input.resume) {
    const resume = input.resume;
    const config = await patient.readConfig(resume.configRef, resume.artifacts);
    return { run, patient, resume, loaded: { runId, config, configRef: resume.configRef, configSha256: resume.configRef.sha256 } };
  }
  // --init-from travels in openRun's input only (no new command): histories without it replay unchanged.
  const opened = await patient.openRun({ configPath: input.configPath, runId, ...(input.initFrom ? { initFrom: input.initFrom } : {}) });
  return { run, patient, loaded: opened.loaded, resume: opened.resume };
}
