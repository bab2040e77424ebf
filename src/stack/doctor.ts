import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { Connection } from '@temporalio/client';
import Docker from 'dockerode';
import { OpenAIModelClient } from '../agent/model';
import type { ChatMessage, ToolSpec } from '../contracts/trajectory';
import { describeSettingsLine, explainConnectError, explainConnectFailure, resolveConnection, type ResolvedConnection } from '../connection';
import { gpuHostLines, queryGpuHost, vllmCudaBuild } from '../check/gpuHost';
import { loadRunConfig } from '../config/load';
import { fetchJson } from '../shared/http';
import { DEFAULTS, paths, REPO_ROOT, resolveConfigPath } from '../shared/paths';
import { savedLayout, type GpuLayout, type SavedLayout } from './layoutFile';

const run = promisify(execFile);

export interface CheckResult {
  component: string;
  ok: boolean;
  detail: string;
  /** The exact command or action that fixes a failed check. */
  fix?: string;
}

export interface DoctorOptions {
  /** Unset: TEMPORAL_ADDRESS, the temporal.toml profile, then 127.0.0.1:7233 (same for namespace). */
  temporalAddress?: string;
  namespace?: string;
  profile?: string;
  inferenceUrl?: string;
  servedModel?: string;
}

type Check = (o: Required<DoctorOptions>) => Promise<Omit<CheckResult, 'component'>>;

const checkTemporal: Check = async ({ temporalAddress, namespace, profile }) => {
  let resolved: ResolvedConnection;
  try {
    resolved = resolveConnection({ address: temporalAddress || undefined, namespace: namespace || undefined, profile: profile || undefined });
  } catch (err) {
    return { ok: false, detail: (err as Error).message.replace(/ Fix: .*$/, ''), fix: (err as Error).message.match(/Fix: (.*)$/)?.[1] ?? 'see docs/connections.md' };
  }
  const { settings } = resolved;
  // Shown on success and failure alike: which cluster, namespace, TLS and profile are in use (never a secret).
  const using = `${describeSettingsLine(settings)}; payload codec ${resolved.codec ? `AES-256-GCM, key id ${resolved.codec.keyId}` : 'off'}`;
  let connection: Connection | undefined;
  try {
    try {
      connection = await Connection.connect({ ...resolved.connectionOptions, connectTimeout: '3s' });
    } catch (err) {
      const msg = await explainConnectFailure(err, settings);
      return { ok: false, detail: `${msg.replace(/ Fix: .*$/, '')}\n      using ${using}`, fix: msg.match(/Fix: (.*)$/)?.[1] ?? 'bash infra/temporal.sh start   (or: ratchet up)' };
    }
    await connection.workflowService.describeNamespace({ namespace: settings.namespace });
    return { ok: true, detail: `${using}; namespace exists (Web UI ${DEFAULTS.temporalUi})` };
  } catch (err) {
    const msg = (err as Error).message;
    const missingNs = /namespace/i.test(msg) && /not found/i.test(msg);
    return {
      ok: false,
      detail: `${missingNs ? `namespace "${settings.namespace}" does not exist on ${settings.address}` : explainConnectError(err, settings).replace(/ Fix: .*$/, '')}\n      using ${using}`,
      fix: missingNs ? `${paths.temporalBin()} operator namespace create --namespace ${settings.namespace}` : 'bash infra/temporal.sh start   (or: ratchet up)',
    };
  } finally {
    await connection?.close();
  }
};

const checkDocker: Check = async () => {
  const docker = new Docker();
  try {
    await docker.ping();
  } catch (err) {
    return { ok: false, detail: `dockerd is not reachable: ${(err as Error).message}`, fix: 'bash infra/docker.sh start' };
  }
  const tagFile = path.join(paths.home(), 'sandbox-image');
  const tag = existsSync(tagFile) ? readFileSync(tagFile, 'utf8').trim() : 'ratchet-sandbox:latest';
  try {
    await docker.getImage(tag).inspect();
    return { ok: true, detail: `dockerd running, sandbox image ${tag} present` };
  } catch {
    return { ok: false, detail: `dockerd running but the sandbox image ${tag} is missing`, fix: 'bash infra/docker.sh setup' };
  }
};

const checkInferenceHealth: Check = async ({ inferenceUrl, servedModel }) => {
  const root = inferenceUrl.replace(/\/v1\/?$/, '');
  try {
    const health = await fetchJson(`${root}/health`, undefined, 5_000);
    if (health.status !== 200) return { ok: false, detail: `${root}/health answered ${health.status}`, fix: 'bash infra/inference.sh start; see .ratchet/logs/vllm.log' };
    const models = await fetchJson(`${inferenceUrl}/models`, undefined, 5_000);
    const ids = ((models.body as { data?: { id: string }[] }).data ?? []).map((m) => m.id);
    if (!ids.includes(servedModel)) {
      return { ok: false, detail: `server is up but does not list "${servedModel}" (it lists: ${ids.join(', ') || 'nothing'})`, fix: 'bash infra/inference.sh stop && bash infra/inference.sh start' };
    }
    return { ok: true, detail: `${inferenceUrl} healthy, serves ${ids.join(', ')}` };
  } catch (err) {
    return { ok: false, detail: `cannot reach ${root}: ${(err as Error).message}`, fix: 'bash infra/inference.sh start   (or: ratchet up)' };
  }
};

const PROBE_TOOL: ToolSpec = {
  type: 'function',
  function: {
    name: 'bash',
    description: 'Run a shell command and return its output.',
    parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  },
};

/**
 * The path every rollout takes (src/agent/model.ts): the prompt rendered by the server's template
 * (/tokenize, tools included), sampled as ids (/v1/completions with return_token_ids and logprobs),
 * the call read from the sampled text, and a second turn whose prompt extends the first's ids.
 */
const checkToolCallTokens: Check = async ({ inferenceUrl, servedModel }) => {
  try {
    const client = new OpenAIModelClient(inferenceUrl, { timeoutMs: 60_000 });
    // SmolLM2-135M does not call tools unprompted: one worked example primes the hermes format,
    // and "required" writes the call's opening, so this checks the server and the path, not the model.
    const messages: ChatMessage[] = [
      { role: 'system', content: 'You are a coding agent. Act only through the bash tool.' },
      { role: 'user', content: 'Show the current date.' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'bash', arguments: '{"command": "date"}' } }] },
      { role: 'tool', tool_call_id: 'call_0', content: 'Mon Nov 23 09:00:00 UTC 2026' },
      { role: 'user', content: 'List the files in the current directory.' },
    ];
    const sampling = { temperature: 0, top_p: 1, max_tokens: 64, tool_choice: 'required' as const };
    const first = await client.complete({ model: servedModel, messages, tools: [PROBE_TOOL], sampling });
    const call = first.tool_calls[0];
    const problems: string[] = [];
    if (!call) problems.push(`no tool call read from the reply ${JSON.stringify((first.content ?? '').slice(0, 80))}`);
    if (!first.completion_token_ids?.length) problems.push('no completion token_ids');
    if (!first.prompt_token_ids?.length) problems.push('no prompt ids');
    if (first.completion_logprobs?.length !== first.completion_token_ids?.length) problems.push('no logprob for every sampled token');
    if (problems.length === 0) {
      const ids = [...first.prompt_token_ids!, ...first.completion_token_ids!];
      const next = await client.complete({
        model: servedModel, tools: [PROBE_TOOL], sampling,
        messages: [...messages, { role: 'assistant', content: first.content, tool_calls: first.tool_calls }, { role: 'tool', tool_call_id: call!.id, content: 'README.md' }],
        context: { ids, messageCount: messages.length + 1 },
      });
      if (!ids.every((id, i) => next.prompt_token_ids?.[i] === id)) problems.push('the second turn\'s prompt does not extend the first\'s ids');
    }
    if (problems.length) {
      return { ok: false, detail: problems.join(', '), fix: 'serve a model whose chat template writes hermes tool calls (infra/inference.sh installs configs/templates/smollm2-tools.jinja); see .ratchet/logs/vllm.log' };
    }
    return { ok: true, detail: `tool call ${call!.function.name}(${call!.function.arguments.slice(0, 40)}), ${first.completion_token_ids!.length} token ids with logprobs, ${first.prompt_token_ids!.length} prompt ids, the next turn extends them` };
  } catch (err) {
    return { ok: false, detail: (err as Error).message, fix: 'bash infra/inference.sh start' };
  }
};

/** The probe adapter doctor loads: SmolLM2's on the CPU stack, the GPU model's own (made by set-up) on a GPU layout. */
export function probeAdapter(layout = savedLayout()?.layout): string {
  return path.join(paths.models(), layout ? `probe-lora-${path.basename(layout.model.path)}` : 'probe-lora');
}

const checkLora: Check = async ({ inferenceUrl }) => {
  const root = inferenceUrl.replace(/\/v1\/?$/, '');
  const saved = savedLayout();
  const adapter = probeAdapter(saved?.layout);
  if (!existsSync(path.join(adapter, 'adapter_config.json'))) {
    return { ok: false, detail: `probe adapter ${adapter} is missing`, fix: saved ? `bash infra/setup.sh ${saved.configPath}` : 'bash infra/inference.sh setup' };
  }
  const name = `doctor-probe-${process.pid}`;
  try {
    const load = await fetchJson(`${root}/v1/load_lora_adapter`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ lora_name: name, lora_path: adapter }),
    });
    if (load.status !== 200) {
      return { ok: false, detail: `load_lora_adapter answered ${load.status}: ${JSON.stringify(load.body).slice(0, 160)}`, fix: 'start the server with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (infra/inference.sh does)' };
    }
    const unload = await fetchJson(`${root}/v1/unload_lora_adapter`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: name }),
    });
    if (unload.status !== 200) return { ok: false, detail: `unload_lora_adapter answered ${unload.status}`, fix: 'see .ratchet/logs/vllm.log' };
    return { ok: true, detail: 'runtime LoRA load and unload work' };
  } catch (err) {
    return { ok: false, detail: (err as Error).message, fix: 'bash infra/inference.sh start' };
  }
};

const checkTrainerEnv: Check = async () => {
  const python = path.join(paths.venv('trainer'), 'bin', 'python');
  if (!existsSync(python)) return { ok: false, detail: `no trainer venv at ${paths.venv('trainer')}`, fix: 'bash infra/trainer-env.sh' };
  try {
    const { stdout } = await run(python, ['-c', 'import torch, transformers, peft, safetensors, temporalio, ratchet_trainer; print(torch.__version__, transformers.__version__, peft.__version__)'], { cwd: REPO_ROOT, timeout: 120_000 });
    return { ok: true, detail: `torch ${stdout.trim().split(' ').join(', transformers ').replace(/, transformers (\S+)$/, ', peft $1')}` };
  } catch (err) {
    return { ok: false, detail: `the trainer environment does not import: ${((err as { stderr?: string }).stderr ?? (err as Error).message).trim().split('\n').pop()}`, fix: `rm -rf ${paths.venv('trainer')} && bash infra/trainer-env.sh` };
  }
};

export const CHECKS: [string, Check][] = [
  ['temporal', checkTemporal],
  ['docker', checkDocker],
  ['inference', checkInferenceHealth],
  ['tool-calls+tokens', checkToolCallTokens],
  ['lora', checkLora],
  ['trainer-env', checkTrainerEnv],
];

/** This host's GPUs against the saved layout (src/check/gpuHost.ts), with the stack running. */
async function gpuResults(saved: SavedLayout): Promise<CheckResult[]> {
  let config;
  try {
    ({ config } = await loadRunConfig(saved.configPath));
    config.model.path = resolveConfigPath(config.model.path);
  } catch (err) {
    return [{ component: 'gpu', ok: false, detail: `the layout's config ${saved.configPath} does not load: ${(err as Error).message.split('\n')[0]}`, fix: `ratchet up --config <config> again` }];
  }
  const host = await queryGpuHost().catch((err: Error) => ({ error: err.message }));
  const venv = paths.venv(saved.layout.vllmVenv);
  return gpuHostLines(config, saved.layout, host, await vllmCudaBuild(venv), venv, true).map((l) => ({
    component: l.message.startsWith('NCCL') ? 'nccl-p2p' : l.message.startsWith('vLLM') || l.message.includes('vLLM CUDA') ? 'vllm-cuda' : 'gpu',
    ok: l.level !== 'fail',
    detail: l.message.replace(/\. Fix: .*$/, ''),
    ...(l.level === 'fail' ? { fix: l.message.match(/Fix: (.*)$/)?.[1] ?? 'docs/gpu.md' } : {}),
  }));
}

/** An NCCL all-reduce over the trainer's GPUs (infra/nccl_check.py under the trainer's torchrun). */
async function checkNccl(layout: GpuLayout): Promise<Omit<CheckResult, 'component'>> {
  const t = layout.trainer;
  try {
    const { stdout } = await run(t.command, ['--standalone', '--nproc-per-node', String(t.ranks), path.join(REPO_ROOT, 'infra', 'nccl_check.py')],
      { cwd: REPO_ROOT, timeout: 180_000, env: { ...process.env, CUDA_VISIBLE_DEVICES: t.env.CUDA_VISIBLE_DEVICES } });
    const r = JSON.parse(stdout.trim().split('\n').pop() ?? '{}') as { ok?: boolean; world_size?: number; seconds?: number; nccl?: string };
    return r.ok ? { ok: true, detail: `all-reduce over GPUs ${t.gpus.join(', ')} (${r.world_size} ranks, NCCL ${r.nccl}) in ${r.seconds} s` }
      : { ok: false, detail: `all-reduce over GPUs ${t.gpus.join(', ')} gave a wrong sum: ${stdout.trim()}`, fix: 'nvidia-smi topo -m; NCCL_DEBUG=INFO shows the path NCCL took' };
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    return { ok: false, detail: `NCCL all-reduce over GPUs ${t.gpus.join(', ')} failed: ${(e.stderr ?? e.message).trim().split('\n').slice(-2).join(' ')}`, fix: `NCCL_DEBUG=INFO CUDA_VISIBLE_DEVICES=${t.env.CUDA_VISIBLE_DEVICES} ${t.command} --standalone --nproc-per-node ${t.ranks} infra/nccl_check.py` };
  }
}

export async function runDoctor(opts: DoctorOptions = {}): Promise<CheckResult[]> {
  const saved = savedLayout();
  if (saved) return runGpuDoctor(opts, saved);
  const o: Required<DoctorOptions> = {
    temporalAddress: opts.temporalAddress ?? '',
    namespace: opts.namespace ?? '',
    profile: opts.profile ?? '',
    inferenceUrl: opts.inferenceUrl ?? DEFAULTS.inferenceUrl,
    servedModel: opts.servedModel ?? DEFAULTS.servedModel,
  };
  return runChecksOf(CHECKS, o);
}

/** The GPU layout's doctor: each vLLM replica, the probe adapter on the first, the GPUs, vLLM's build and NCCL. */
async function runGpuDoctor(opts: DoctorOptions, saved: SavedLayout): Promise<CheckResult[]> {
  const l = saved.layout;
  const base = { temporalAddress: opts.temporalAddress ?? '', namespace: opts.namespace ?? '', profile: opts.profile ?? '', servedModel: l.model.servedName };
  const lora = l.inference.some((r) => r.args.includes('--enable-lora'));
  if (l.only === 'trainer') {
    // A trainer-only host: Temporal (another host's, TEMPORAL_ADDRESS) and the trainer; vLLM and dockerd are checked where they run.
    const results = [...await runChecksOf([['temporal', checkTemporal], ['trainer-env', checkTrainerEnv]], { ...base, inferenceUrl: '' }), ...await gpuResults(saved)];
    if (l.trainer.ranks > 1) results.push({ component: 'nccl', ...(await checkNccl(l)) });
    return results;
  }
  const results = [
    ...await runChecksOf([['temporal', checkTemporal], ['docker', checkDocker]], { ...base, inferenceUrl: l.inference[0]!.baseUrl }),
    ...(await Promise.all(l.inference.map(async (r) => (await runChecksOf([[r.name, checkInferenceHealth]], { ...base, inferenceUrl: r.baseUrl }))
      .map((x) => (x.ok ? x : { ...x, fix: `ratchet up   (its log: ${path.join(paths.logs(), `${r.name}.log`)})` }))))).flat(),
    ...await runChecksOf([['tool-calls+tokens', checkToolCallTokens], ...(lora ? [['lora', checkLora] as [string, Check]] : []), ['trainer-env', checkTrainerEnv]],
      { ...base, inferenceUrl: l.inference[0]!.baseUrl }),
    ...await gpuResults(saved),
  ];
  if (l.trainer.ranks > 1) results.push({ component: 'nccl', ...(await checkNccl(l)) });
  return results;
}

/** The checks at once (none changes what another sees; the trainer's imports alone take seconds), reported in order. */
async function runChecksOf(checks: [string, Check][], o: Required<DoctorOptions>): Promise<CheckResult[]> {
  return Promise.all(checks.map(async ([component, check]): Promise<CheckResult> => {
    try {
      return { component, ...(await check(o)) };
    } catch (err) {
      return { component, ok: false, detail: `check crashed: ${(err as Error).message}` };
    }
  }));
}

/** One line per component, the fix indented below a failure. */
export function formatDoctor(results: CheckResult[], color = false): string {
  const paint = (s: string, code: number) => (color ? `\x1b[${code}m${s}\x1b[0m` : s);
  return results
    .map((r) => {
      const head = `${r.ok ? paint('ok  ', 32) : paint('FAIL', 31)}  ${r.component.padEnd(18)} ${r.detail}`;
      return r.ok || !r.fix ? head : `${head}\n      fix: ${r.fix}`;
    })
    .join('\n');
}
