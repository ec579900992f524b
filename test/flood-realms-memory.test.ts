import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { SyntheticZulip, visitRealm } from '../bench/synthetic-upstream.js';
import { logLine, runCli, until, type CliRun } from './support/cli-run.js';

/**
 * X2, X12 in bytes: a server with a realm per `Host`, each a 2.1 realm of 5,000 users, flooded
 * with new realms (one full presence poll and one `GET /users/me` each, 8 at a time) through the
 * shipped CLI with the default memory budgets, in a process of its own. Its peak RSS (the
 * kernel's high-water mark, VmHWM) stays under a fixed figure: per-realm state is compact and
 * held to the budgets, and the heap's garbage to a margin over what is live.
 */

const MiB = 1024 * 1024;
/**
 * Peak RSS allowed: 701 MiB on the build before the per-realm state was sized to what it holds;
 * 436 MiB at load average 10–25 and 494–514 MiB on a quiet machine after it (a flood taken
 * faster leaves more garbage between collections). With the parse worker's young generation
 * held to 8 MiB and the test's CLI bundle starting the bundled worker (it started the worker's
 * TypeScript through tsx, which the shipped dist/ never does): 379 MiB at load average 15
 * against 443 MiB for the build before in the same hour (2026-11-28). But a faster flood kept
 * more realms' ledgers alive through their snapshots (each slot held its ledger strongly): the
 * same build peaked at 501–511 MiB on an idle machine and 441–470 MiB with both cores busy;
 * with the ledger held weakly 393–400 MiB idle. With the ledger's users in typed columns as
 * well: 348–363 MiB on an idle machine (2026-11-28). The bench's 2,000 realms: bench/RESULTS.md.
 */
const PEAK_RSS_LIMIT = 440 * MiB;
const REALMS = 200;

const highWaterMark = (pid: number) => Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;

describe('memory under a flood of realms (X2, X12)', () => {
  let run: CliRun | undefined;
  let upstream: SyntheticZulip | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    run?.child.kill('SIGKILL');
    await run?.exited;
    await upstream?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it(`takes on ${REALMS} realms of 5,000 users with a bounded peak RSS`, { timeout: 300_000 }, async () => {
    upstream = new SyntheticZulip({ users: 5000, churnPerMinute: 0, realmPerHost: true });
    const url = await upstream.start();
    dir = mkdtempSync(join(tmpdir(), 'flood-realms-'));
    const config = join(dir, 'config.json');
    // Realms taken on as fast as they come: the memory is what is measured, not the admission rate.
    writeFileSync(config, JSON.stringify({ presence: { newRealmsPerMinute: 1_000_000, newRealmsPerAddressPerMinute: 1_000_000 } }));
    run = runCli(['--upstream', url, '--port', '0', '--config', config, '--access-log', 'off']);
    const start = await until('the start-up line', () => logLine(run!, 'zulip-compat-shim listening'));
    const pool = new Pool(String(start.listen), { connections: 8 });
    let next = 0;
    let failed = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (next < REALMS) {
          const i = next++;
          if ((await visitRealm(pool, i, i)).some((r) => r.status !== 200)) failed++;
        }
      }),
    );
    await pool.close();
    const peak = highWaterMark(run.child.pid!);
    expect(failed).toBe(0);
    expect(upstream.stats.presenceFull).toBe(REALMS); // each Host a realm of its own, each fetched once
    console.log(`${REALMS} realms of 5,000 users: peak RSS ${(peak / MiB).toFixed(0)} MiB`);
    expect(peak).toBeLessThan(PEAK_RSS_LIMIT);
  });
});
