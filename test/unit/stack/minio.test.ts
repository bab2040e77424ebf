/** Where infra/minio.sh's MinIO is (src/stack/minio.ts): its settings and defaults, read against the script itself. */
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { minioSettings } from '../../../src/stack/minio';

describe('infra/minio.sh\'s MinIO', () => {
  test('infra/minio.sh\'s defaults when nothing is set, read from the script itself', () => {
    const script = readFileSync(path.join(__dirname, '..', '..', '..', 'infra', 'minio.sh'), 'utf8');
    const def = (v: string) => new RegExp(`\\$\\{${v}:-([^}]+)\\}`).exec(script)?.[1];
    expect(minioSettings({})).toEqual({
      endpoint: `http://${def('RATCHET_MINIO_ADDRESS')}:${def('RATCHET_MINIO_PORT')}`, bucket: def('RATCHET_MINIO_BUCKET'),
      rootUser: def('MINIO_ROOT_USER'), rootPassword: def('MINIO_ROOT_PASSWORD'),
    });
  });

  test('its settings from the environment; a server on every address is reached on the loopback', () => {
    expect(minioSettings({ RATCHET_MINIO_PORT: '9207', RATCHET_MINIO_ADDRESS: '0.0.0.0', RATCHET_MINIO_BUCKET: 'b', MINIO_ROOT_USER: 'u', MINIO_ROOT_PASSWORD: 'p' }))
      .toEqual({ endpoint: 'http://127.0.0.1:9207', bucket: 'b', rootUser: 'u', rootPassword: 'p' });
  });
});
