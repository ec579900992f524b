import { existsSync } from 'node:fs';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * The files that take longest, longest first. They start before all others, so that none is
 * left running alone at the end while the other workers have nothing to do. Without this, a
 * clean clone (no timings from an earlier run) starts the largest files first, and the fuzz
 * files, a line each, last.
 */
const LONGEST_FIRST = [
  'test/package.test.ts',
  'test/fuzz.test.ts',
  'test/bench-smoke.test.ts',
  'test/fuzz-more.test.ts',
  'test/faults.test.ts',
  'test/cli.test.ts',
  'test/passthrough.test.ts',
  'test/memory-flood.test.ts',
  'test/redis-ha.test.ts',
  'test/odd-requests.test.ts',
  'test/presence-ledger.property.test.ts',
  'test/har-cli.test.ts',
];

// A renamed file would silently lose its place.
for (const name of LONGEST_FIRST) if (!existsSync(new URL(name, import.meta.url))) throw new Error(`LONGEST_FIRST: no ${name}`);

class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (f: TestSpecification) => {
      const i = LONGEST_FIRST.findIndex((name) => f.moduleId.endsWith(`/${name}`));
      return i < 0 ? LONGEST_FIRST.length : i;
    };
    // The rest keep vitest's own order (earlier timings, else size): the sort is stable.
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}

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
    // it checks (support modules register hooks per call, never at their top level). Measured with
    // `--isolate` (2026-11-28, two cores under a load average of 15-20): 888 s against 692 s, setup
    // 559 s against 55 s, and more files past their timeouts: it stays off.
    isolate: false,
    // Longest files first (LONGEST_FIRST), then vitest's own order.
    sequence: { sequencer: LongestFirst },
    // The CLI and the other scripts tests start as child processes, bundled once per run.
    globalSetup: ['test/support/global-setup.ts'],
    // P13 over the whole suite: no credential in any log line, HAR file or metric.
    setupFiles: ['test/support/secrets-setup.ts'],
  },
});
