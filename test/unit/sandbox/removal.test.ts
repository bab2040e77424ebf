import { dockerStatus, removeContainer } from '../../../src/sandbox/removal';

const refusing = (err?: unknown) => {
  const calls: unknown[] = [];
  return { calls, c: { remove: async (opts?: unknown) => { calls.push(opts); if (err) throw err; } } };
};
const http = (statusCode: number) => Object.assign(new Error(`(HTTP code ${statusCode})`), { statusCode });

describe('removeContainer', () => {
  test('force-removes with volumes', async () => {
    const { c, calls } = refusing();
    await expect(removeContainer(c as never)).resolves.toBe('removed');
    expect(calls).toEqual([{ force: true, v: true }]);
  });

  test('gone (404) or going (409) is done', async () => {
    await expect(removeContainer(refusing(http(404)).c as never)).resolves.toBe('gone');
    await expect(removeContainer(refusing(http(409)).c as never)).resolves.toBe('gone');
  });

  test('anything else is thrown for the caller to retry: a dockerd error, dockerd unreachable', async () => {
    await expect(removeContainer(refusing(http(500)).c as never)).rejects.toMatchObject({ statusCode: 500 });
    const down = Object.assign(new Error('connect ECONNREFUSED /var/run/docker.sock'), { code: 'ECONNREFUSED' });
    await expect(removeContainer(refusing(down).c as never)).rejects.toBe(down);
  });

  test('dockerStatus reads dockerode\'s statusCode, undefined without one', () => {
    expect(dockerStatus(http(404))).toBe(404);
    expect(dockerStatus(new Error('x'))).toBeUndefined();
    expect(dockerStatus(undefined)).toBeUndefined();
  });
});
