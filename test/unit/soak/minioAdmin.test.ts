/**
 * The MinIO admin client's pure parts (src/soak/minioAdmin.ts), each against an independent
 * implementation: the request signature against the AWS SDK's own signer (@smithy/signature-v4, which
 * @aws-sdk/client-s3 signs every S3 call with), the encrypted add-user body against bytes written by
 * madmin-go and secure-io/sio-go themselves (the Go libraries MinIO decrypts it with; the vector was
 * made with pbkdf2.Key + sio.AES_256_GCM.Stream as madmin.EncryptData does, and checked with
 * madmin.DecryptData). The real server's answer is in test/integration/store-refusals.test.ts.
 */
import { createHash, createHmac } from 'node:crypto';
import { SignatureV4 } from '@smithy/signature-v4';
import { encryptAdminData, signV4 } from '../../../src/soak/minioAdmin';

type SourceData = string | ArrayBuffer | ArrayBufferView;
const bytes = (d: SourceData): string | Buffer =>
  typeof d === 'string' ? d : ArrayBuffer.isView(d) ? Buffer.from(d.buffer, d.byteOffset, d.byteLength) : Buffer.from(d);

/** The SDK signer's hash, on Node's crypto (the SDK's own is not a dependency of ours). */
class NodeSha256 {
  private readonly h;
  constructor(secret?: SourceData) { this.h = secret === undefined ? createHash('sha256') : createHmac('sha256', bytes(secret)); }
  update(data: SourceData): void { this.h.update(bytes(data)); }
  digest(): Promise<Uint8Array> { return Promise.resolve(new Uint8Array(this.h.digest())); }
}

describe('signV4', () => {
  const creds = { accessKeyId: 'ratchet', secretAccessKey: 'ratchet-secret' };
  const now = new Date('2026-11-28T13:37:05.123Z');

  async function sdkAuthorization(method: string, url: URL, body: Buffer): Promise<string> {
    const signer = new SignatureV4({ credentials: creds, region: 'us-east-1', service: 's3', sha256: NodeSha256, uriEscapePath: false });
    const signed = await signer.sign({
      method, protocol: url.protocol, hostname: url.hostname, port: Number(url.port), path: url.pathname,
      query: Object.fromEntries(url.searchParams.entries()),
      headers: { host: url.host, 'x-amz-content-sha256': createHash('sha256').update(body).digest('hex') },
      body,
    }, { signingDate: now });
    return signed.headers.authorization!;
  }

  test.each([
    ['PUT', 'http://127.0.0.1:9100/minio/admin/v3/set-user-status?accessKey=ratchet-soak&status=disabled', ''],
    ['PUT', 'http://127.0.0.1:9100/minio/admin/v3/set-user-or-group-policy?policyName=readwrite&userOrGroup=ratchet-soak&isGroup=false', ''],
    ['PUT', 'http://localhost:9201/minio/admin/v3/add-user?accessKey=a%20b%2Bc*', 'encrypted body bytes'],
    ['DELETE', 'http://127.0.0.1:9100/minio/admin/v3/remove-user?accessKey=x', ''],
  ])('%s %s: the same Authorization as the AWS SDK\'s signer', async (method, u, text) => {
    const url = new URL(u);
    const body = Buffer.from(text);
    const ours = signV4({ method, url, body, accessKey: creds.accessKeyId, secretKey: creds.secretAccessKey, region: 'us-east-1', service: 's3', now });
    expect(ours['x-amz-date']).toBe('20261128T133705Z');
    expect(ours.authorization).toBe(await sdkAuthorization(method, url, body));
  });

  test('another secret gives another signature (the comparison can fail)', async () => {
    const url = new URL('http://127.0.0.1:9100/minio/admin/v3/set-user-status?accessKey=k&status=enabled');
    const ours = signV4({ method: 'PUT', url, body: Buffer.alloc(0), accessKey: creds.accessKeyId, secretKey: 'other', region: 'us-east-1', service: 's3', now });
    expect(ours.authorization).not.toBe(await sdkAuthorization('PUT', url, Buffer.alloc(0)));
  });
});

describe('encryptAdminData', () => {
  const password = 'ratchet-secret';
  const data = Buffer.from('{"secretKey":"soak-secret-0123456789","status":"enabled"}');
  const salt = Buffer.alloc(32, 0x11);
  const nonce = Buffer.alloc(8, 0x22);

  test('equals madmin-go + sio-go\'s bytes for the same salt and nonce', () => {
    const fromGo = '1111111111111111111111111111111111111111111111111111111111111111' + '02' + '2222222222222222' +
      '62a445ddf271b77cedb8ec632adc26012ddac066e8ebfde397c341fb6aeb8376f4aa079fb69f5c8d4f848b3ffc50e3467d69c86a3e256e18c04a6b6064bb4306976658e9886b0e43de';
    expect(encryptAdminData(password, data, { salt, nonce }).toString('hex')).toBe(fromGo);
  });

  test('a payload over one 16 KiB fragment (three fragments, the last flagged) equals theirs too', () => {
    const out = encryptAdminData(password, Buffer.alloc(2 * (1 << 14) + 5, 7), { salt, nonce });
    expect(out.length).toBe(32862);
    expect(createHash('sha256').update(out).digest('hex')).toBe('1a812644f7d7f651a58f94c0e8f168f542f83be983c1d010e07d1c5fa64b6982');
  });
});
