/**
 * The MinIO infra/minio.sh runs, from the same settings it reads (its defaults when unset): one reading for
 * every caller (the store bench, the soak's store key, the s3:// tests).
 */
export function minioSettings(env: NodeJS.ProcessEnv = process.env): { endpoint: string; bucket: string; rootUser: string; rootPassword: string } {
  const address = env.RATCHET_MINIO_ADDRESS || '127.0.0.1';
  return {
    endpoint: `http://${address === '0.0.0.0' ? '127.0.0.1' : address}:${env.RATCHET_MINIO_PORT || '9100'}`,
    bucket: env.RATCHET_MINIO_BUCKET || 'ratchet',
    rootUser: env.MINIO_ROOT_USER || 'ratchet',
    rootPassword: env.MINIO_ROOT_PASSWORD || 'ratchet-secret',
  };
}
