import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.ratchet/**', 'trainer/**', 'taskgen/**'] },
  ...tseslint.configs.recommended,
  {
    files: ['src/**/*.ts', 'test/**/*.ts'],
    languageOptions: { parserOptions: { project: './tsconfig.test.json' } },
    rules: {
      // A forgotten await on an activity or a client call is a real bug.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      'no-console': ['error', { allow: ['warn', 'error'] }],
    },
  },
  {
    // Workflow code is replayed deterministically in a sandbox: no Node built-ins, no I/O.
    files: ['src/workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [
          { group: ['node:*', 'fs', 'fs/*', 'path', 'os', 'child_process', 'crypto', 'http', 'https', 'net', 'stream', 'worker_threads', 'dockerode', 'openai', 'pino'], message: 'Workflow files must stay deterministic: do I/O in an activity.' },
          { group: ['../activities', '../activities/*'], message: 'Workflows know activities by their contract: import it from src/contracts.' },
        ],
      }],
    },
  },
  {
    // Activities implement the contracts in src/contracts; they never reach into workflow code.
    files: ['src/activities/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [{ group: ['../workflows', '../workflows/*'], message: 'Activities depend on src/contracts, not on workflows.' }],
      }],
    },
  },
  {
    // Plain-JS entry points that `node` runs from the built dist/ (test/fixtures/upgrade/mainWorkerB.js), and jest's
    // test sequencer (test/helpers/integrationOrder.js), which jest loads untransformed: CommonJS.
    files: ['test/fixtures/**/*.js', 'test/helpers/**/*.js'],
    languageOptions: { sourceType: 'commonjs', globals: { require: 'readonly', __dirname: 'readonly', process: 'readonly', console: 'readonly' } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    // The CLI and benchmarks print for people.
    files: ['src/cli/**/*.ts', 'src/bench/**/*.ts'],
    rules: { 'no-console': 'off' },
  },
);
