import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { Connection } from '@temporalio/client';
import Docker from 'dockerode';
import type { RunConfig } from '../config/schema';
import { describeSettingsLine, resolveTemporalSettings, sdkConnectionOptions } from '../connection';
import { paths } from '../shared/paths';
import { fetchJson } from '../shared/http';
import { checkLogprobsMode } from './logprobsMode';
import { fail, ok, type CheckLine } from './types';

export interface StackTarget {
  temporalAddress?: string;
  namespace?: string;
  profile?: string;
}

/** Whether the parts a run talks to answer now: Temporal, every inference server, dockerd and the sandbox image. Starts nothing. */
export async function checkStack(c: RunConfig, t: StackTarget = {}): Promise<CheckLine[]> {
  const checks: Promise<CheckLine>[] = [
    (async () => {
      let conn: Connection | undefined;
      // The same settings the workers and the CLI use: TEMPORAL_* variables, temporal.toml profiles, TLS, API key.
      let settings;
      try {
        settings = resolveTemporalSettings({ address: t.temporalAddress, namespace: t.namespace, profile: t.profile });
      } catch (err) {
        return fail('stack', (err as Error).message);
      }
      const { address, namespace } = settings;
      try {
        conn = await Connection.connect({ ...sdkConnectionOptions(settings), connectTimeout: '3s' });
        await conn.workflowService.describeNamespace({ namespace });
        return ok('stack', `Temporal ${describeSettingsLine(settings)}`);
      } catch (err) {
        return fail('stack', `Temporal ${address} (namespace "${namespace}"): ${(err as Error).message.split('\n')[0]}. Fix: ratchet up, or set TEMPORAL_ADDRESS`);
      } finally {
        await conn?.close();
      }
    })(),
    ...c.inference.base_urls.map(async (url, i) => {
      try {
        const { body: json } = await fetchJson(`${url.replace(/\/$/, '')}/models`, undefined, 5_000);
        const body = (typeof json === 'object' && json !== null ? json : {}) as { data?: { id: string }[] };
        const ids = (body.data ?? []).map((m) => m.id);
        if (!ids.includes(c.inference.served_model)) {
          return fail('stack', `inference.base_urls[${i}] ${url} does not serve inference.served_model "${c.inference.served_model}" (it lists ${ids.join(', ') || 'nothing'})`);
        }
        return ok('stack', `inference ${url} serves "${c.inference.served_model}"`);
      } catch (err) {
        return fail('stack', `inference.base_urls[${i}] ${url}: not reachable (${(err as Error).message}). Fix: ratchet up (or bash infra/inference.sh start)`);
      }
    }),
    (async () => {
      const docker = new Docker();
      try {
        await docker.ping();
      } catch (err) {
        return fail('stack', `dockerd not reachable: ${(err as Error).message}. Fix: bash infra/docker.sh start`);
      }
      const tagFile = path.join(paths.home(), 'sandbox-image');
      const image = c.sandbox.image ?? (existsSync(tagFile) ? readFileSync(tagFile, 'utf8').trim() : 'ratchet-sandbox:latest');
      try {
        await docker.getImage(image).inspect();
        return ok('stack', `dockerd running, sandbox image ${image} present`);
      } catch {
        return fail('stack', `${c.sandbox.image ? 'sandbox.image' : 'sandbox image'} ${image} is not in dockerd. Fix: ${c.sandbox.image ? 'docker pull or build it' : 'bash infra/docker.sh setup'}`);
      }
    })(),
  ];
  // A run sampling at T != 1 or with top-k/top-p needs the servers' processed logprobs.
  const logprobs = checkLogprobsMode(c).then((ls) => ls.map((l) => ({ section: 'stack' as const, ...l })));
  return [...await Promise.all(checks), ...await logprobs];
}
