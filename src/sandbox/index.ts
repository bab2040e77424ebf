export { SandboxManager, type AcquireSpec, type SandboxManagerOptions } from './manager';
export type { Sandbox, SandboxExecOptions, RepoSpec } from './sandbox';
export { AbortError, type ExecResult } from './exec';
export { sweep, startJanitor, removalReason } from './janitor';
export { LABELS, currentWorkerId } from './labels';
export { buildCreateOptions, defaultImage } from './options';
