import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { logLine, runCli, until, type CliRun } from './support/cli-run.js';
import { SyntheticZulip } from './support/synthetic-zulip.js';

/**
 * X8 in bytes: recording a 3,000-user realm's full presence answers (no sharing, so every poll
 * records one, about 0.7 MB each), 4 at a time, through the shipped CLI in a process of its
 * own. Its peak RSS (the kernel's high-water mark, VmHWM) stays under a fixed figure: the
 * recorder holds each body once, never as whole-entry JSON strings.
 */

const MiB = 1024 * 1024;
/**
 * Peak RSS allowed for the run below (2026-11-28: 480 MiB with the recorder's per-exchange
 * copies, 299 MiB without; 224 MiB with bodies escaped into the writer's one buffer and the
 * heap's growth held, issue 44).
 */
const PEAK_RSS_LIMIT = 270 * MiB;
const POLLS = 120;

const highWaterMark = (pid: number) => Number(/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;

describe('recording memory (X8)', () => {
  let run: CliRun | undefined;
  let upstream: SyntheticZulip | undefined;
  afterEach(async () => {
    run?.child.kill('SIGKILL');
    await run?.exited;
    await upstream?.stop();
  });

  it(`records ${POLLS} full presence answers of a 3,000-user realm with a bounded peak RSS`, { timeout: 240_000 }, async () => {
    upstream = new SyntheticZulip({ users: 3000, changesPerSecond: 20 });
    const url = await upstream.start();
    const har = join(tmpdir(), 'record-memory.har');
    run = runCli(['--upstream', url, '--port', '0', '--log-level', 'info', '--access-log', 'off', '--coalesce-ms', '0', '--record', har]);
    const start = await until('the start-up line', () => logLine(run!, 'zulip-compat-shim listening'));
    const pool = new Pool(String(start.listen), { connections: 4 });
    let next = 0;
    let failed = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < POLLS) {
          const i = next++;
          const r = await pool.request({
            method: 'POST',
            path: '/api/v1/users/me/presence',
            headers: {
              host: 'record.test',
              authorization: upstream!.auth(i % upstream!.n),
              'content-type': 'application/x-www-form-urlencoded',
            },
            body: 'status=active&last_update_id=-1',
          });
          await r.body.dump();
          if (r.statusCode !== 200) failed++;
        }
      }),
    );
    await pool.close();
    const peak = highWaterMark(run.child.pid!);
    run.child.kill('SIGTERM');
    await run.exited;
    rmSync(har, { force: true }); // hundreds of MB: not left for the suite's secret scan
    expect(failed).toBe(0);
    console.log(`recording ${POLLS} full answers: peak RSS ${(peak / MiB).toFixed(0)} MiB`);
    expect(peak).toBeLessThan(PEAK_RSS_LIMIT);
  });
});
