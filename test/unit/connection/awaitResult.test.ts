import { ServiceError, WorkflowFailedError } from '@temporalio/client';
import { awaitResult } from '../../../src/connection/awaitResult';

describe('awaitResult', () => {
  it('polls again while the server is away and returns the workflow\'s result', async () => {
    let calls = 0;
    const handle = { result: async () => { calls += 1; if (calls < 3) throw new ServiceError('Failed to get Workflow execution history'); return 42; } };
    const retries: number[] = [];
    await expect(awaitResult<number>(handle, { retryEveryMs: 1, onRetry: (_e, ms) => retries.push(ms) })).resolves.toBe(42);
    expect(calls).toBe(3);
    expect(retries).toHaveLength(2);
  });

  it('rethrows what the workflow itself ended with', async () => {
    const failed = new WorkflowFailedError('Workflow execution failed', undefined, 'TERMINATED' as never);
    let calls = 0;
    const handle = { result: async () => { calls += 1; throw failed; } };
    await expect(awaitResult(handle, { retryEveryMs: 1 })).rejects.toBe(failed);
    expect(calls).toBe(1);
  });

  it('gives up once the server has been away longer than the bound', async () => {
    const handle = { result: async () => { throw new ServiceError('unavailable'); } };
    await expect(awaitResult(handle, { retryEveryMs: 5, unavailableForMs: 20 })).rejects.toBeInstanceOf(ServiceError);
  });
});
