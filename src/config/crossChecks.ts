import type { RunConfig } from './schema';
import { majority, syncUnits } from '../shared/replicas';
import { fanoutIssues } from './fanoutChecks';

/**
 * Settings that depend on each other, checked together after the schema has
 * checked each on its own. Pure: each problem names every key involved, the
 * first one being the one to change, and says the fix.
 */
import type { ConfigIssue } from './issue';
export type { ConfigIssue };

/** How long a whole rollout may take: an episode must fit in it. */
export const ROLLOUT_TIMEOUT_S = 30 * 60;

export function crossCheck(c: RunConfig): ConfigIssue[] {
  // A step's fan-out against Temporal's limits (rollouts in chunks, shards, the manifest): ./fanoutChecks.ts.
  const issues: ConfigIssue[] = [...fanoutIssues(c)];
  const o = c.orchestrator;

  if (c.sampling.max_tokens >= o.seq_len) {
    issues.push({
      key: 'sampling.max_tokens',
      message: `${c.sampling.max_tokens} tokens per turn do not fit in orchestrator.seq_len = ${o.seq_len} with any prompt. ` +
        'Fix: lower sampling.max_tokens or raise orchestrator.seq_len',
    });
  }

  const retention = c.artifacts.retention;
  if (retention && retention.keep_last < o.async_level + 1) {
    issues.push({
      key: 'artifacts.retention.keep_last',
      message: `${retention.keep_last} checkpoints kept, but with orchestrator.async_level = ${o.async_level} rollouts may still use the adapters of the newest ${o.async_level + 1}. ` +
        `Fix: set artifacts.retention.keep_last to ${o.async_level + 1} or more`,
    });
  }

  if (o.rollouts_per_example < 2) {
    issues.push({
      key: 'orchestrator.rollouts_per_example',
      message: `${o.rollouts_per_example} rollout per task: a group of one has no baseline, so every advantage (orchestrator.advantage.kind = "${o.advantage.kind}") is 0 and no step trains. ` +
        'Fix: set orchestrator.rollouts_per_example to 2 or more (4-16 is usual)',
    });
  }

  if (c.inference.request_timeout_s >= ROLLOUT_TIMEOUT_S) {
    issues.push({
      key: 'inference.request_timeout_s',
      message: `${c.inference.request_timeout_s} s is longer than a whole rollout may take (${ROLLOUT_TIMEOUT_S} s): a stuck model call would time the rollout out instead of failing itself. ` +
        `Fix: set inference.request_timeout_s below ${ROLLOUT_TIMEOUT_S}`,
    });
  }

  const units = syncUnits(c.inference);
  if (c.inference.sync_quorum !== undefined && c.inference.sync_quorum > units) {
    const what = c.inference.sync_task_queues.length > 0 ? 'inference hosts (inference.sync_task_queues)' : 'replicas (inference.base_urls)';
    issues.push({
      key: 'inference.sync_quorum',
      message: `${c.inference.sync_quorum} replicas must load each new version, but the run has ${units} ${what}: no weight sync could ever succeed. ` +
        `Fix: set inference.sync_quorum to at most ${units} (or remove it: a majority, ${majority(units)}), or add replicas`,
    });
  }

  c.env.forEach((env, i) => {
    // Worst case: every tool call runs to its timeout, then the tests run (3x, as scoring does).
    const worst = env.args.max_tool_calls * c.sandbox.exec_timeout_s + Math.max(3 * c.sandbox.exec_timeout_s, 60);
    if (worst > ROLLOUT_TIMEOUT_S) {
      issues.push({
        key: `env.${i}.args.max_tool_calls`,
        message: `${env.args.max_tool_calls} tool calls x sandbox.exec_timeout_s = ${c.sandbox.exec_timeout_s} s (plus the test run) can take ${worst} s, ` +
          `longer than a rollout may take (${ROLLOUT_TIMEOUT_S} s): such episodes time out and are retried forever. ` +
          'Fix: lower env.args.max_tool_calls or sandbox.exec_timeout_s',
      });
    }
    if (env.args.max_turns > env.args.max_tokens) {
      issues.push({
        key: `env.${i}.args.max_turns`,
        message: `${env.args.max_turns} turns cannot happen within env.args.max_tokens = ${env.args.max_tokens} completion tokens (each turn takes at least one). ` +
          'Fix: lower env.args.max_turns or raise env.args.max_tokens',
      });
    }
    const twin = c.env.findIndex((e, j) => j < i && (e.module ?? e.id) === (env.module ?? env.id) && e.dataset === env.dataset);
    if (twin >= 0) {
      issues.push({
        key: `env.${i}`,
        message: `same environment and dataset as env.${twin} ("${env.id}", ${env.dataset}): the two sections sample the same tasks. ` +
          'Fix: remove one, or change its weight instead',
      });
    }
  });

  return issues;
}
