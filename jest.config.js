/** Two projects: fast unit tests with fakes, and integration tests against the real stack. */
const tsJest = ['ts-jest', { tsconfig: 'tsconfig.test.json' }];
// Transform cache with the other build caches, not under os.tmpdir() (npm test gives each run its own TMPDIR);
// CI keeps it in the machine cache (RATCHET_JEST_CACHE, infra/test.sh), so a fresh clone does not transpile again.
const cacheDirectory = process.env.RATCHET_JEST_CACHE || '<rootDir>/.ratchet/cache/jest';
module.exports = {
  // The real-stack suites that take the stack's workers over run after the rest, multihost last (test/helpers/integrationOrder.js).
  testSequencer: '<rootDir>/test/helpers/integrationOrder.js',
  projects: [
    {
      displayName: 'unit',
      testMatch: ['<rootDir>/test/unit/**/*.test.ts', '<rootDir>/examples/**/*.test.ts'],
      transform: { '^.+\\.ts$': tsJest },
      testEnvironment: 'node',
      cacheDirectory,
    },
    {
      displayName: 'integration',
      testMatch: ['<rootDir>/test/integration/**/*.test.ts'],
      transform: { '^.+\\.ts$': tsJest },
      testEnvironment: 'node',
      cacheDirectory,
      setupFilesAfterEnv: ['<rootDir>/test/helpers/integration-setup.ts'],
    },
  ],
};
