import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ROOT } from './children.js';

/**
 * X2's full-size figure: `npm run bench -- flood [--hosts 10000] [--users 1000]`. A shim with the
 * default memory budgets gets one presence poll and one own-profile request from each of
 * `hosts` distinct Host values, each with its own credentials, against a synthetic 2.1 realm of
 * `users` users (test/support/memory-flood.ts, in a child process with --expose-gc); prints the
 * heap (after full collections, buffers included) and RSS before and after.
 */

const { values } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'flood'),
  options: { hosts: { type: 'string' }, users: { type: 'string' }, concurrency: { type: 'string' } },
  strict: true,
});
const run = spawnSync(
  process.execPath,
  [
    '--expose-gc',
    '--import',
    'tsx',
    join(ROOT, 'test', 'support', 'memory-flood.ts'),
    values.users ?? '1000',
    values.hosts ?? '10000',
    'default',
    values.concurrency ?? '16',
  ],
  { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] },
);
if (run.status !== 0) throw new Error(`memory-flood.ts failed (${run.status})`);
const r = JSON.parse(run.stdout.trim().split('\n').pop()!) as Record<string, number>;
const MiB = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
process.stdout.write(
  `X2 flood: ${r.hosts} hosts × ${r.users} users, default budgets (${MiB(r.budgetBytes!)} in all), ${r.seconds!.toFixed(0)} s\n` +
    `heap ${MiB(r.heapBefore!)} → ${MiB(r.heapAfter!)} (+${MiB(r.heapGrowth!)}), RSS ${MiB(r.rssBefore!)} → ${MiB(r.rssAfter!)}\n`,
);
