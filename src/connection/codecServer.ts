/**
 * A Temporal codec server: the HTTP contract the Web UI and `temporal --codec-endpoint`
 * call to show encrypted payloads decoded to those who hold the key.
 *
 *   POST /decode, POST /encode (also /{namespace}/decode and /{namespace}/encode)
 *   body and answer: {"payloads": [{"metadata": {"encoding": "<base64>"}, "data": "<base64>"}]}
 *   (proto3 JSON: every bytes field is base64)
 *
 * CORS answers only the configured Web UI origins (the browser calls from the UI's
 * page), with credentials allowed so the UI's "include cross-origin credentials"
 * works. With a token set, every POST needs `Authorization: Bearer <token>`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Payload, PayloadCodec } from '@temporalio/common';

export interface CodecServerOptions {
  codec: PayloadCodec;
  /** Web UI origins allowed to call, e.g. http://127.0.0.1:8233. */
  origins: string[];
  host?: string;
  port: number;
  /** When set, POSTs must carry `Authorization: Bearer <token>`. */
  token?: string;
  /** Largest request body accepted, bytes (the 2 MB payload limit, times base64's growth, with room). */
  maxBodyBytes?: number;
}

interface JsonPayload {
  metadata?: Record<string, string>;
  data?: string;
}

export function payloadFromJson(p: JsonPayload): Payload {
  const metadata: Record<string, Uint8Array> = {};
  for (const [k, v] of Object.entries(p.metadata ?? {})) metadata[k] = Buffer.from(v, 'base64');
  return { metadata, data: Buffer.from(p.data ?? '', 'base64') };
}

export function payloadToJson(p: Payload): JsonPayload {
  const metadata: Record<string, string> = {};
  for (const [k, v] of Object.entries(p.metadata ?? {})) metadata[k] = Buffer.from(v ?? new Uint8Array()).toString('base64');
  return { metadata, data: Buffer.from(p.data ?? new Uint8Array()).toString('base64') };
}

class HttpError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

async function readBody(req: IncomingMessage, limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new HttpError(413, `body over ${limit} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function parsePayloads(body: string): Payload[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw new HttpError(400, 'body is not JSON; expected {"payloads": [...]}');
  }
  const payloads = (parsed as { payloads?: unknown })?.payloads;
  if (!Array.isArray(payloads)) throw new HttpError(400, 'body has no "payloads" array');
  return payloads.map((p) => payloadFromJson(p as JsonPayload));
}

export function codecRequestHandler(opts: CodecServerOptions) {
  const limit = opts.maxBodyBytes ?? 16 * 1024 * 1024;
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const origin = req.headers.origin;
    if (origin && opts.origins.includes(origin)) {
      res.setHeader('Access-Control-Allow-Origin', origin);
      res.setHeader('Access-Control-Allow-Credentials', 'true');
      res.setHeader('Vary', 'Origin');
    }
    const route = (req.url ?? '').split('?')[0]!.match(/^(?:\/[^/]+)?\/(encode|decode)\/?$/)?.[1];
    try {
      if (!route) throw new HttpError(404, 'not found: POST /encode or /decode');
      if (req.method === 'OPTIONS') {
        res.setHeader('Access-Control-Allow-Methods', 'POST, OPTIONS');
        res.setHeader('Access-Control-Allow-Headers', 'Content-Type, X-Namespace, Authorization');
        res.setHeader('Access-Control-Max-Age', '600');
        res.writeHead(200).end();
        return;
      }
      if (req.method !== 'POST') throw new HttpError(405, 'method not allowed: use POST');
      if (opts.token && req.headers.authorization !== `Bearer ${opts.token}`) throw new HttpError(401, 'unauthorized');
      const payloads = parsePayloads(await readBody(req, limit));
      let out: Payload[];
      try {
        out = route === 'decode' ? await opts.codec.decode(payloads) : await opts.codec.encode(payloads);
      } catch (err) {
        throw new HttpError(400, (err as Error).message);
      }
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ payloads: out.map(payloadToJson) }));
    } catch (err) {
      const status = err instanceof HttpError ? err.status : 500;
      res.writeHead(status, { 'Content-Type': 'text/plain' }).end(`${(err as Error).message}\n`);
    }
  };
}

/** Listens; resolves with the server and its bound port once it is accepting. */
export async function startCodecServer(opts: CodecServerOptions): Promise<{ server: Server; port: number; close: () => Promise<void> }> {
  const handler = codecRequestHandler(opts);
  const server = createServer((req, res) => { void handler(req, res); });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host ?? '127.0.0.1', () => resolve());
  });
  return {
    server,
    port: (server.address() as AddressInfo).port,
    close: () => new Promise((r) => server.close(() => r())),
  };
}
