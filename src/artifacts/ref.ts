import { z } from 'zod';

/**
 * A claim check: large objects live in the artifact store and Temporal payloads
 * carry only this. Pure (no I/O) so workflow code may import it.
 */
export const ArtifactRef = z.object({
  uri: z.string().min(1),
  sha256: z.string().regex(/^[0-9a-f]{64}$/, 'sha256 must be 64 lowercase hex characters'),
  bytes: z.number().int().nonnegative(),
});
export type ArtifactRef = z.infer<typeof ArtifactRef>;
