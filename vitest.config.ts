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
    // A worker keeps the modules it loaded for the next file: loading the shim and its packages
    // again for every file cost about two seconds of CPU per file. No file relies on a fresh
    // module: each starts its own fakes, shims and stores, and the setup file below resets what
    // it checks (support modules register hooks per call, never at their top level).
    isolate: false,
    // The CLI and the other scripts tests start as child processes, bundled once per run.
    globalSetup: ['test/support/global-setup.ts'],
    // P13 over the whole suite: no credential in any log line, HAR file or metric.
    setupFiles: ['test/support/secrets-setup.ts'],
  },
});
