/**
 * The few calls of MinIO's admin API (/minio/admin/v3, what `mc admin user` sends) that the soak's
 * store-credentials incident needs: a user of its own with read-write on the buckets, disabled and
 * enabled again. Written against the API with Node's crypto, so nothing beyond the MinIO server that
 * infra/minio.sh builds has to be installed. Requests are signed with AWS Signature V4 (service s3);
 * add-user's body is encrypted as madmin-go's EncryptData does (its PBKDF2 + AES-256-GCM form, which
 * every MinIO server decrypts), with the signing account's secret key.
 */
import { createCipheriv, createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';

export interface MinioAdminSettings {
  /** http://host:port of the MinIO server. */
  endpoint: string;
  /** An account with admin rights (the root user of infra/minio.sh). */
  accessKey: string;
  secretKey: string;
  region?: string;
}

const sha256Hex = (data: Buffer | string): string => createHash('sha256').update(data).digest('hex');
const hmac = (key: Buffer | string, data: string): Buffer => createHmac('sha256', key).update(data).digest();

/** RFC 3986 encoding, as SigV4's canonical query string wants it (encodeURIComponent leaves !'()* alone). */
const uriEncode = (s: string): string => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

export interface SignInput {
  method: string;
  url: URL;
  body: Buffer;
  accessKey: string;
  secretKey: string;
  region: string;
  service: string;
  /** The request's time; the signature is valid for about 15 minutes around it. */
  now: Date;
}

/** The headers that sign a request with AWS Signature V4 (host, x-amz-content-sha256, x-amz-date, authorization). */
export function signV4({ method, url, body, accessKey, secretKey, region, service, now }: SignInput): Record<string, string> {
  const amzDate = now.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');
  const day = amzDate.slice(0, 8);
  const payloadHash = sha256Hex(body);
  const headers: Record<string, string> = { host: url.host, 'x-amz-content-sha256': payloadHash, 'x-amz-date': amzDate };
  const signed = Object.keys(headers).sort();
  const query = [...url.searchParams.entries()]
    .map(([k, v]) => [uriEncode(k), uriEncode(v)] as const)
    .sort(([a, av], [b, bv]) => (a < b ? -1 : a > b ? 1 : av < bv ? -1 : av > bv ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
  const canonicalPath = url.pathname.split('/').map((seg) => uriEncode(decodeURIComponent(seg))).join('/');
  const canonical = [method, canonicalPath, query, ...signed.map((h) => `${h}:${headers[h]!.trim()}`), '', signed.join(';'), payloadHash].join('\n');
  const scope = `${day}/${region}/${service}/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', amzDate, scope, sha256Hex(canonical)].join('\n');
  const key = hmac(hmac(hmac(hmac(`AWS4${secretKey}`, day), region), service), 'aws4_request');
  const signature = createHmac('sha256', key).update(toSign).digest('hex');
  return { ...headers, authorization: `AWS4-HMAC-SHA256 Credential=${accessKey}/${scope}, SignedHeaders=${signed.join(';')}, Signature=${signature}` };
}

/** madmin-go's id for a key derived with PBKDF2-SHA256 (8192 rounds) and data sealed with AES-256-GCM. */
const PBKDF2_AES_GCM = 0x02;
/** sio's fragment size: a payload longer than this is sealed in several fragments. */
const SIO_FRAGMENT = 1 << 14;

/**
 * An admin request body as madmin-go's EncryptData writes it: salt (32) | algorithm id (1) | nonce (8) |
 * the data as a secure-io/sio stream. The stream seals fragments of 16 KiB with AES-256-GCM under the
 * nonce followed by the fragment's sequence number (little-endian uint32, from 1); each fragment's
 * associated data is a flag byte (0x80 on the last, else 0) and the tag of an empty message sealed
 * under sequence number 0. `salt` and `nonce` are random unless given (tests compare with a vector).
 */
export function encryptAdminData(password: string, data: Buffer, opts: { salt?: Buffer; nonce?: Buffer } = {}): Buffer {
  const salt = opts.salt ?? randomBytes(32);
  const nonce = opts.nonce ?? randomBytes(8);
  const key = pbkdf2Sync(password, salt, 8192, 32, 'sha256');
  const seal = (seq: number, plain: Buffer, aad: Buffer): Buffer => {
    const iv = Buffer.alloc(12);
    nonce.copy(iv);
    iv.writeUInt32LE(seq, 8);
    const c = createCipheriv('aes-256-gcm', key, iv);
    c.setAAD(aad);
    return Buffer.concat([c.update(plain), c.final(), c.getAuthTag()]);
  };
  const tag0 = seal(0, Buffer.alloc(0), Buffer.alloc(0));
  const out: Buffer[] = [salt, Buffer.from([PBKDF2_AES_GCM]), nonce];
  // Full fragments while more data follows; the last (possibly full, possibly empty) carries the final flag.
  let seq = 1;
  let rest = data;
  while (rest.length > SIO_FRAGMENT) {
    out.push(seal(seq++, rest.subarray(0, SIO_FRAGMENT), Buffer.concat([Buffer.from([0x00]), tag0])));
    rest = rest.subarray(SIO_FRAGMENT);
  }
  out.push(seal(seq, rest, Buffer.concat([Buffer.from([0x80]), tag0])));
  return Buffer.concat(out);
}

export type AccountStatus = 'enabled' | 'disabled';

export class MinioAdminError extends Error {
  constructor(readonly status: number, readonly body: string, what: string, endpoint: string) {
    super(`MinIO admin API at ${endpoint}: ${what} failed (HTTP ${status}: ${body.slice(0, 300)}). ` +
      'Fix: check the server is up (infra/minio.sh status) and that MINIO_ROOT_USER / MINIO_ROOT_PASSWORD are the ones it started with');
    this.name = 'MinioAdminError';
  }
}

export class MinioAdmin {
  constructor(readonly settings: MinioAdminSettings) {}

  private async call(method: string, op: string, query: Record<string, string>, body: Buffer = Buffer.alloc(0)): Promise<void> {
    const url = new URL(`/minio/admin/v3/${op}`, this.settings.endpoint);
    for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
    const headers = signV4({
      method, url, body, accessKey: this.settings.accessKey, secretKey: this.settings.secretKey,
      region: this.settings.region ?? 'us-east-1', service: 's3', now: new Date(),
    });
    const res = await fetch(url, { method, headers, body: body.length ? new Uint8Array(body) : undefined, signal: AbortSignal.timeout(30_000) });
    if (!res.ok) throw new MinioAdminError(res.status, await res.text(), `${op} ${JSON.stringify(query)}`, this.settings.endpoint);
  }

  /** Creates (or updates) a user with this secret key, enabled. */
  async addUser(accessKey: string, secretKey: string): Promise<void> {
    const body = encryptAdminData(this.settings.secretKey, Buffer.from(JSON.stringify({ secretKey, status: 'enabled' })));
    await this.call('PUT', 'add-user', { accessKey }, body);
  }

  /** Gives a user one of the server's policies (readwrite: every bucket, read and write). */
  async setUserPolicy(accessKey: string, policyName: string): Promise<void> {
    await this.call('PUT', 'set-user-or-group-policy', { policyName, userOrGroup: accessKey, isGroup: 'false' });
  }

  /** Disables or enables a user: a disabled user's requests are refused (HTTP 403, InvalidAccessKeyId) until enabled again. */
  async setUserStatus(accessKey: string, status: AccountStatus): Promise<void> {
    await this.call('PUT', 'set-user-status', { accessKey, status });
  }

  async removeUser(accessKey: string): Promise<void> {
    await this.call('DELETE', 'remove-user', { accessKey });
  }
}
