/**
 * Optional payload encryption: AES-256-GCM over each whole payload, so workflow
 * inputs, results and activity arguments reach the Temporal server (and its
 * database, and the Web UI) only as ciphertext.
 *
 * Wire format, shared byte for byte with the trainer (trainer/ratchet_trainer/codec.py)
 * and with Temporal's encryption samples:
 *   metadata  encoding = "binary/encrypted"
 *             encryption-key-id = <key id>        (which key to decrypt with: rotation)
 *             encryption-cipher = "AES-256-GCM"
 *   data      nonce (12 random bytes) || ciphertext || GCM tag (16 bytes)
 *   plaintext the original Payload, protobuf-encoded (metadata and data)
 *
 * Keys come from the environment, never from a file in the run config:
 *   RATCHET_CODEC_KEY            base64 of 32 random bytes (`openssl rand -base64 32`): encrypts, and decrypts its own
 *   RATCHET_CODEC_KEY_ID         optional name for it; default: "k" + 12 hex of its sha256 (no secret in it)
 *   RATCHET_CODEC_PREVIOUS_KEYS  optional, comma-separated [id=]base64 keys still accepted for decrypting
 * Payloads that are not encrypted pass through decode unchanged, so a run that
 * started without the codec stays readable.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import type { Payload, PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { ConnectionConfigError } from './settings';

export const ENCODING_ENCRYPTED = 'binary/encrypted';
export const CIPHER = 'AES-256-GCM';
export const META_KEY_ID = 'encryption-key-id';
export const META_CIPHER = 'encryption-cipher';
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const KEY_BYTES = 32;

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array | null | undefined) => (b ? new TextDecoder().decode(b) : '');

export interface CodecKey {
  id: string;
  key: Buffer;
}

export function defaultKeyId(key: Buffer): string {
  return `k${createHash('sha256').update(key).digest('hex').slice(0, 12)}`;
}

/** Parses a base64 key; the message names the variable and how to make a good one. */
export function parseKey(b64: string, setting: string): Buffer {
  const trimmed = b64.trim();
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(trimmed)) {
    throw new ConnectionConfigError(`${setting} is not base64. Fix: generate a key with \`openssl rand -base64 32\``);
  }
  const key = Buffer.from(trimmed, 'base64');
  if (key.length !== KEY_BYTES) {
    throw new ConnectionConfigError(`${setting} decodes to ${key.length} bytes; AES-256-GCM needs exactly ${KEY_BYTES}. ` +
      'Fix: generate a key with `openssl rand -base64 32`');
  }
  return key;
}

export class AesGcmCodec implements PayloadCodec {
  private readonly byId: Map<string, Buffer>;

  /** `current` encrypts; it and `previous` decrypt. `nonce` is for the cross-language test vectors only. */
  constructor(readonly current: CodecKey, previous: CodecKey[] = [], private readonly nonce: () => Buffer = () => randomBytes(NONCE_BYTES)) {
    this.byId = new Map([...previous, current].map((k) => [k.id, k.key]));
  }

  get keyId(): string {
    return this.current.id;
  }

  async encode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((p) => this.encodeOne(p));
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((p) => this.decodeOne(p));
  }

  encodeOne(payload: Payload): Payload {
    const plain = temporal.api.common.v1.Payload.encode({ metadata: payload.metadata, data: payload.data }).finish();
    const nonce = this.nonce();
    const cipher = createCipheriv('aes-256-gcm', this.current.key, nonce);
    const body = Buffer.concat([cipher.update(plain), cipher.final()]);
    return {
      metadata: { encoding: enc(ENCODING_ENCRYPTED), [META_KEY_ID]: enc(this.current.id), [META_CIPHER]: enc(CIPHER) },
      data: Buffer.concat([nonce, body, cipher.getAuthTag()]),
    };
  }

  decodeOne(payload: Payload): Payload {
    if (dec(payload.metadata?.encoding) !== ENCODING_ENCRYPTED) return payload;
    const id = dec(payload.metadata?.[META_KEY_ID]);
    const key = this.byId.get(id);
    if (!key) {
      throw new Error(`payload encrypted with key id "${id}", which this process does not hold (it has: ${[...this.byId.keys()].join(', ')}). ` +
        'Fix: add that key to RATCHET_CODEC_PREVIOUS_KEYS (or make it RATCHET_CODEC_KEY)');
    }
    const data = Buffer.from(payload.data ?? new Uint8Array());
    if (data.length < NONCE_BYTES + TAG_BYTES) throw new Error(`encrypted payload is ${data.length} bytes, too short for AES-256-GCM`);
    const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, NONCE_BYTES));
    decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
    let plain: Buffer;
    try {
      plain = Buffer.concat([decipher.update(data.subarray(NONCE_BYTES, data.length - TAG_BYTES)), decipher.final()]);
    } catch {
      throw new Error(`payload with key id "${id}" fails authentication: the key under that id is not the one that encrypted it, or the payload was altered`);
    }
    const p = temporal.api.common.v1.Payload.decode(plain);
    return { metadata: p.metadata ?? {}, data: p.data ?? new Uint8Array() };
  }
}

function parseKeyList(list: string): CodecKey[] {
  return list.split(',').map((s) => s.trim()).filter(Boolean).map((entry, i) => {
    const eq = entry.indexOf('=');
    // base64 may end in '=': an id is a prefix before '=' that is not itself base64 padding.
    const hasId = eq > 0 && !/^=*$/.test(entry.slice(eq));
    const [id, b64] = hasId ? [entry.slice(0, eq), entry.slice(eq + 1)] : [undefined, entry];
    const key = parseKey(b64, `RATCHET_CODEC_PREVIOUS_KEYS entry ${i + 1}`);
    return { id: id ?? defaultKeyId(key), key };
  });
}

/** The codec the environment asks for, or undefined when RATCHET_CODEC_KEY is unset. */
export function codecFromEnv(env: Record<string, string | undefined> = process.env): AesGcmCodec | undefined {
  const b64 = env.RATCHET_CODEC_KEY;
  if (b64 === undefined || b64 === '') {
    if (env.RATCHET_CODEC_PREVIOUS_KEYS) {
      throw new ConnectionConfigError('RATCHET_CODEC_PREVIOUS_KEYS is set but RATCHET_CODEC_KEY is not. Fix: set RATCHET_CODEC_KEY to the current key');
    }
    return undefined;
  }
  const key = parseKey(b64, 'RATCHET_CODEC_KEY');
  const id = env.RATCHET_CODEC_KEY_ID?.trim() || defaultKeyId(key);
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(id)) {
    throw new ConnectionConfigError(`RATCHET_CODEC_KEY_ID=${JSON.stringify(id)} is not a key id. Fix: 1-64 letters, digits, '.', '_' or '-'`);
  }
  return new AesGcmCodec({ id, key }, parseKeyList(env.RATCHET_CODEC_PREVIOUS_KEYS ?? ''));
}
