import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: ['test/soak/**'],
    testTimeout: 20_000,
    hookTimeout: 20_000,
    pool: 'forks',
    // Most files wait (on child processes, sockets, Redis, deadlines) more than they compute: on a
    // two-core machine the default (cores - 1 = one file at a time) leaves both cores idle.
    maxWorkers: 4,
    // The CLI and the other scripts tests start as child processes, bundled once per run.
    globalSetup: ['test/support/global-setup.ts'],
    // P13 over the whole suite: no credential in any log line, HAR file or metric.
    setupFiles: ['test/support/secrets-setup.ts'],
  },
});
