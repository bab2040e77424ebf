/**
 * The soak's store key (src/soak/storeKey.ts): the environment its workers get, and the swap that puts the stack's own environment back.
 * The admin calls themselves run against a real MinIO in test/integration/store-refusals.test.ts.
 */
import { storeKeyEnv, swapAwsEnv } from '../../../src/soak/storeKey';

describe('swapAwsEnv', () => {
  test('puts the soak user\'s key in force, clears a profile or token that would sign otherwise, and puts back exactly what was there', () => {
    const env: NodeJS.ProcessEnv = { AWS_ACCESS_KEY_ID: 'root', AWS_SECRET_ACCESS_KEY: 'root-secret', AWS_PROFILE: 'prod', PATH: '/bin' };
    const putBack = swapAwsEnv(storeKeyEnv({ accessKey: 'ratchet-soak', secretKey: 's3cret' }), env);
    expect(env).toEqual({ AWS_ACCESS_KEY_ID: 'ratchet-soak', AWS_SECRET_ACCESS_KEY: 's3cret', AWS_REGION: 'us-east-1', PATH: '/bin' });
    putBack();
    expect(env).toEqual({ AWS_ACCESS_KEY_ID: 'root', AWS_SECRET_ACCESS_KEY: 'root-secret', AWS_PROFILE: 'prod', PATH: '/bin' });
  });
});
