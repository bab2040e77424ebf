/** Two projects: fast unit tests with fakes, and integration tests against the real stack. */
const tsJest = ['ts-jest', { tsconfig: 'tsconfig.test.json' }];
module.exports = {
  projects: [
    {
      displayName: 'unit',
      testMatch: ['<rootDir>/test/unit/**/*.test.ts', '<rootDir>/examples/**/*.test.ts'],
      transform: { '^.+\\.ts$': tsJest },
      testEnvironment: 'node',
    },
    {
      displayName: 'integration',
      testMatch: ['<rootDir>/test/integration/**/*.test.ts'],
      transform: { '^.+\\.ts$': tsJest },
      testEnvironment: 'node',
      setupFilesAfterEnv: ['<rootDir>/test/helpers/integration-setup.ts'],
    },
  ],
};
