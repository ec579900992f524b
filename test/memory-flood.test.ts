import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { nodeArgsFor, ROOT } from './support/build.js';

/**
 * X2: a flood of distinct Host values, each with its own credentials, against one realm of a
 * synthetic upstream: the shim's heap (after full collections, buffers included) grows by no
 * more than its byte budgets plus a fixed base. Without the budgets the same flood grows it by
 * about 35 MB (200 hosts × 300 users); with them, by what the budgets allow.
 */

const run = promisify(execFile);
const MiB = 1024 * 1024;

describe('memory under a flood of hosts and credentials (X2)', () => {
  it('stays within the configured budgets', { timeout: 120_000 }, async () => {
    const { stdout } = await run(process.execPath, ['--expose-gc', ...nodeArgsFor('test/support/memory-flood.ts'), '300', '200', 'small'], {
      cwd: ROOT,
      timeout: 110_000,
      maxBuffer: 1 << 20,
    });
    const r = JSON.parse(stdout.trim().split('\n').pop()!) as { heapGrowth: number; budgetBytes: number; hosts: number };
    expect(r.hosts).toBe(200);
    expect(r.heapGrowth).toBeLessThan(r.budgetBytes + 8 * MiB);
  });

  it('stays within the budgets with a realm per Host, the realms coming faster than the snapshots expire', {
    timeout: 120_000,
  }, async () => {
    const { stdout } = await run(process.execPath, ['--expose-gc', ...nodeArgsFor('test/support/realm-flood-heap.ts'), '2000', '200'], {
      cwd: ROOT,
      timeout: 110_000,
      maxBuffer: 1 << 20,
    });
    const r = JSON.parse(stdout.trim().split('\n').pop()!) as { heapGrowth: number; budgetBytes: number; realms: number; failed: number };
    expect(r.realms).toBe(200);
    // A load whose entry a full budget evicted meanwhile answered every caller "evicted" (a 500):
    // 71 of these 200 realms.
    expect(r.failed).toBe(0);
    // A snapshot kept for its window held its realm's ledger past the ledgers' budget: these
    // 200 realms of 2,000 users grew the heap by 26 MiB against 7.4 MiB of budgets (5 MiB now).
    expect(r.heapGrowth).toBeLessThan(r.budgetBytes + 8 * MiB);
  });
});
