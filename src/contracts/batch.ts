import type { ArtifactRef } from '../artifacts/ref';

/** What buildBatch and buildSftBatch return: the step's batch in the trainer's format, and what the builder saw. */
export interface BuildBatchOutput {
  batch: ArtifactRef;
  manifest: ArtifactRef;
  /** The builder's BatchStats (src/samples/builder.ts); open, as older histories recorded fewer keys. */
  summary: {
    samples: number;
    dropped?: Record<string, number>;
    [k: string]: unknown;
  };
}
