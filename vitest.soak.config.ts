import { defineConfig } from 'vitest/config';

/** `npm run soak`: the long sustained-load test (test/soak/), with a GC the test can call. */
export default defineConfig({
  test: {
    include: ['test/soak/**/*.test.ts'],
    pool: 'forks',
    execArgv: ['--expose-gc'],
    testTimeout: 600_000,
    hookTimeout: 60_000,
    setupFiles: ['test/support/secrets-setup.ts'],
  },
});
