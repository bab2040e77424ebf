/**
 * Bad input to the batch builder. Each carries a stable `code` (the ApplicationFailure
 * type the activity throws) and a message that names the file, the field, the
 * problem and the fix. None of them goes away on retry.
 */
export type BatchErrorCode =
  | 'MissingTokenIds'
  | 'RetokenizeFailed'
  | 'TokenOutOfVocab'
  | 'TokenizerModelMismatch'
  | 'NonPrefixTemplate'
  | 'MalformedTrajectory'
  | 'FutureRollout'
  | 'EmptyBatch'
  | 'CorruptArtifact';

export class BatchBuildError extends Error {
  constructor(public readonly code: BatchErrorCode, message: string) {
    super(message);
    this.name = 'BatchBuildError';
  }
}
