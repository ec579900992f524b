import { appendFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { spawnChild, useBuiltChildren, type Child } from './children.js';
import { lastUpdateIdOf, percentile, send, type Req } from './load.js';
import { basicAuth, PRESENCE_PATH } from './synthetic-upstream.js';

/**
 * B7: the cost curve of a large realm on a 2.1 upstream. For each realm size a
 * synthetic upstream and a shim start in processes of their own; the figures are
 * - cold: the first full modern answer (user list and presence read, converted, merged);
 * - refresh: a full poll alone after the sharing window ran out (median of 3);
 * - delta polls from 4 connections for `phase` seconds while the snapshot refreshes every
 *   `coalesceMs`: their p99 and max, and the shim's longest event-loop block (wall time, and
 *   the main thread's CPU time in its busiest gap, since the machine is shared);
 * - the shim's own share of each delta poll: beside every poll, a ping (`ping_only`, as the
 *   shim sends the caller's report) straight to the upstream, sent at the same moment; own
 *   share = the poll's time less the ping's. Its p99 leaves out each refresh's leader (the poll
 *   in flight when the upstream got the full fetch that started first: its own report starts
 *   the refresh, and it waits for it on purpose); the mean bytes of a delta answer beside it;
 * - RSS and heap (after full collections) at the end; bytes per user = heap and buffers held
 *   above the shim's empty baseline, over the users.
 *
 * `npm run bench -- b7 [--sizes 1000,10000,50000,100000] [--phase 10] [--coalesce-ms 2000] [--callers 4]`
 */

const { values: flags } = parseArgs({
  args: process.argv.slice(2).filter((a) => a !== 'b7'),
  options: {
    sizes: { type: 'string' },
    phase: { type: 'string' },
    'coalesce-ms': { type: 'string' },
    era: { type: 'string' },
    /** A CPU profile of the shim's delta phase per size goes here. */
    profile: { type: 'string' },
    /**
     * Callers the delta polls take turns as (default 4: one a connection). A caller's own report
     * enters the ledger when it was not active in the last minute (P15), so with tens of
     * thousands of them, as in a large realm where everyone polls once a minute, nearly every
     * poll's report changes the ledger while a refresh is merged.
     */
    callers: { type: 'string' },
    /** Every delta poll of each size (sent at, times, bytes, leader) and the full fetches, as JSON lines, to this file. */
    samples: { type: 'string' },
  },
  strict: true,
});
await useBuiltChildren();
const sizes = (flags.sizes ?? '1000,10000,50000,100000').split(',').map(Number);
const phaseMs = Number(flags.phase ?? 10) * 1000;
const coalesceMs = Number(flags['coalesce-ms'] ?? 2000);
const era = flags.era ?? '2.1';
const profileDir = flags.profile;
const callers = Number(flags.callers ?? 4);
const log = (s: string) => process.stdout.write(`${s}\n`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const form = { 'content-type': 'application/x-www-form-urlencoded' };

/** The caller's report alone, straight to the upstream: what the shim itself sends it for a delta poll. */
function ping(caller: number): Req {
  return {
    method: 'POST',
    path: PRESENCE_PATH,
    headers: { ...form, authorization: basicAuth(caller) },
    body: 'status=active&ping_only=true',
  };
}

function poll(caller: number, lastUpdateId: number): Req {
  return {
    method: 'POST',
    path: PRESENCE_PATH,
    headers: { ...form, authorization: basicAuth(caller) },
    body: `status=active&last_update_id=${lastUpdateId}`,
  };
}

interface Memory {
  rss: number;
  heapUsed: number;
  arrayBuffers: number;
}

interface Blocks {
  maxMs: number;
  maxCpuInGapMs: number;
  gapOfMaxCpuMs: number;
  maxGcMs: number;
  maxGcKind: string;
}

export interface B7Row {
  users: number;
  coldMs: number;
  refreshMs: number;
  deltaP99Ms: number;
  deltaMaxMs: number;
  deltaPolls: number;
  /** The shim's own share (poll less the direct ping beside it), leaders left out: p99 and max. */
  ownShareP99Ms: number;
  ownShareMaxMs: number;
  /** Delta polls' p99 with the leaders left out, and how many polls were leaders. */
  deltaP99NoLeaderMs: number;
  leaders: number;
  /** Mean body bytes of a delta poll's answer. */
  deltaBytesMean: number;
  worstBlockMs: number;
  worstBlockCpuMs: number;
  /** The longest garbage-collection pause during the delta phase, and its kind. */
  worstGcMs: number;
  worstGcKind: string;
  rssMiB: number;
  bytesPerUser: number;
  /** What each memory budget charges after the work (its /metrics), MiB by budget. */
  budgetsMiB: Record<string, number>;
}

/** What each memory budget of the shim charges now, MiB by budget (memory_budgets_bytes). */
async function budgetsCharged(pool: Pool): Promise<Record<string, number>> {
  const res = await pool.request({ method: 'GET', path: '/metrics', headers: { host: 'bench.test' } });
  const text = await res.body.text();
  return Object.fromEntries(
    [...text.matchAll(/^\w*memory_budgets_bytes\{budget="(\w+)"\} (\S+)$/gm)].map(([, budget, bytes]) => [
      budget!,
      Number(bytes) / 2 ** 20,
    ]),
  );
}

interface DeltaPoll {
  /** When it was sent (this process's performance.now()). */
  at: number;
  ms: number;
  /** The direct ping's time, sent beside it. */
  directMs: number;
  bytes: number;
  /** Its own report started a refresh: it waits for it on purpose. */
  leader: boolean;
}

/** When the upstream got full presence fetches after `since`, on this process's clock. */
async function fetchesSeen(up: Child, since: number): Promise<number[]> {
  const { times, now } = await up.call<{ times: number[]; now: number }>('fetch-times');
  const offset = performance.now() - now;
  return times.map((t) => t + offset).filter((t) => t >= since);
}

/**
 * Each refresh's leader: of the polls in flight when the upstream got the refresh's full fetch,
 * the one answered last (the fetch follows its report, and it waits for the refresh, up to as
 * long as the last one took; a poll sent after it joins the refresh and is answered from the
 * ledger).
 */
function markLeaders(polls: DeltaPoll[], fetches: number[]): void {
  for (const f of fetches) {
    let leader: DeltaPoll | undefined;
    for (const p of polls) if (p.at <= f && p.at + p.ms >= f && (!leader || p.at + p.ms > leader.at + leader.ms)) leader = p;
    if (leader) leader.leader = true;
  }
}

async function measure(users: number): Promise<B7Row> {
  const up = await spawnChild('upstream-process.ts', [era, String(users), '0.02', '60000'], { readyTimeoutMs: 600_000 });
  let shim: Child | undefined;
  try {
    await up.call('churn', { on: true });
    shim = await spawnChild('shim-process.ts', [up.url, String(coalesceMs), 'warn'], { nodeArgs: ['--expose-gc'] });
    const base = await shim.call<Memory>('memory', { gc: true });
    const pool = new Pool(shim.url, { connections: 8, keepAliveTimeout: 60_000 });
    const direct = new Pool(up.url, { connections: 8, keepAliveTimeout: 60_000 });
    try {
      const cold = await send(pool, poll(0, -1));
      if (cold.status !== 200) throw new Error(`cold poll: HTTP ${cold.status}`);
      let id = lastUpdateIdOf(cold.tail) ?? -1;

      const refreshes: number[] = [];
      for (let i = 0; i < 3; i++) {
        await sleep(coalesceMs + 50);
        const r = await send(pool, poll(1, -1));
        if (r.status !== 200) throw new Error(`refresh poll: HTTP ${r.status}`);
        refreshes.push(r.ms);
        id = Math.max(id, lastUpdateIdOf(r.tail) ?? -1);
      }
      refreshes.sort((a, b) => a - b);

      // The profiler first: starting it is itself a long block, not the shim's.
      if (profileDir) await shim.call('profile-start');
      await shim.call('eld-start');
      const polls: DeltaPoll[] = [];
      const start = performance.now();
      const end = start + phaseMs;
      let turn = 0;
      const worker = async (w: number) => {
        let mine = id;
        while (performance.now() < end) {
          const caller = 2 + (callers === 4 ? w : turn++ % callers);
          const at = performance.now();
          const [r, d] = await Promise.all([send(pool, poll(caller, mine)), send(direct, ping(caller))]);
          if (r.status !== 200) throw new Error(`delta poll: HTTP ${r.status}`);
          if (d.status !== 200) throw new Error(`direct ping: HTTP ${d.status}`);
          polls.push({ at, ms: r.ms, directMs: d.ms, bytes: r.bytes, leader: false });
          mine = Math.max(mine, lastUpdateIdOf(r.tail) ?? mine);
        }
      };
      await Promise.all([0, 1, 2, 3].map(worker));
      const blocks = await shim.call<Blocks>('eld-stop');
      const fetches = await fetchesSeen(up, start);
      markLeaders(polls, fetches);
      if (flags.samples) appendFileSync(flags.samples, `${JSON.stringify({ users, start, fetches, polls })}\n`);
      const ms = polls.map((p) => p.ms);
      const others = polls.filter((p) => !p.leader);
      const own = Float64Array.from(others.map((p) => p.ms - p.directMs)).sort();
      const othersMs = Float64Array.from(others.map((p) => p.ms)).sort();
      if (profileDir) await shim.call('profile-stop', { file: join(profileDir, `b7-${users}.cpuprofile`) });
      // Memory held after the work, not the buffers of a refresh still being read (its leader
      // is answered before it is taken in).
      await shim.call('settled');
      const after = await shim.call<Memory>('memory', { gc: true });
      const budgetsMiB = await budgetsCharged(pool);
      const sorted = Float64Array.from(ms).sort();
      return {
        users,
        coldMs: cold.ms,
        refreshMs: refreshes[1]!,
        deltaP99Ms: percentile(sorted, 99),
        deltaMaxMs: sorted[sorted.length - 1] ?? Number.NaN,
        deltaPolls: ms.length,
        ownShareP99Ms: percentile(own, 99),
        ownShareMaxMs: own[own.length - 1] ?? Number.NaN,
        deltaP99NoLeaderMs: percentile(othersMs, 99),
        leaders: polls.length - others.length,
        deltaBytesMean: polls.reduce((n, p) => n + p.bytes, 0) / polls.length,
        worstBlockMs: blocks.maxMs,
        worstBlockCpuMs: blocks.maxCpuInGapMs,
        worstGcMs: blocks.maxGcMs,
        worstGcKind: blocks.maxGcKind,
        rssMiB: after.rss / 2 ** 20,
        bytesPerUser: (after.heapUsed + after.arrayBuffers - base.heapUsed - base.arrayBuffers) / users,
        budgetsMiB,
      };
    } finally {
      await pool.close();
      await direct.close();
    }
  } finally {
    await shim?.stop();
    await up.stop();
  }
}

const fmt = (v: number, d = 0) => v.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });

log(
  `B7 cost curve: synthetic ${era} upstream, coalesceMs ${coalesceMs}, delta phase ${phaseMs / 1000} s, ${callers} callers, sizes ${sizes.join(', ')}`,
);
log(
  `load average at start: ${os
    .loadavg()
    .map((v) => v.toFixed(2))
    .join(' / ')}`,
);
const rows: B7Row[] = [];
for (const users of sizes) {
  const row = await measure(users);
  rows.push(row);
  log(JSON.stringify(row));
}
log('');
log(
  '| users | cold full answer | refresh | delta p99 / max during refreshes | own share p99 / max, leaders left out (leaders) | delta bytes, mean | worst block (wall / main-thread CPU) | longest GC pause | RSS | bytes per user |',
);
log('|---|---|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  log(
    `| ${fmt(r.users)} | ${fmt(r.coldMs)} ms | ${fmt(r.refreshMs)} ms | ${fmt(r.deltaP99Ms)} / ${fmt(r.deltaMaxMs)} ms | ${fmt(r.ownShareP99Ms)} / ${fmt(r.ownShareMaxMs)} ms (${r.leaders}) | ${fmt(r.deltaBytesMean)} | ${fmt(r.worstBlockMs, 1)} / ${fmt(r.worstBlockCpuMs, 1)} ms | ${fmt(r.worstGcMs, 1)} ms (${r.worstGcKind}) | ${fmt(r.rssMiB)} MiB | ${fmt(r.bytesPerUser)} |`,
  );
}
// B7's targets (bench/README.md), at 100k users (and 250k must work at all).
const at = (n: number) => rows.find((r) => r.users === n);
const verdict = (ok: boolean) => (ok ? 'met' : 'NOT met');
const r100 = at(100_000);
if (r100) {
  log('');
  log(`targets at 100,000 users:`);
  log(
    `- no event-loop block above 50 ms during a refresh: ${fmt(r100.worstBlockMs, 1)} ms wall, ${fmt(r100.worstBlockCpuMs, 1)} ms main-thread CPU (${verdict(r100.worstBlockCpuMs <= 50)} on CPU; wall ${verdict(r100.worstBlockMs <= 50)})`,
  );
  log(`- delta polls p99 ≤ 250 ms during a refresh: ${fmt(r100.deltaP99Ms)} ms (${verdict(r100.deltaP99Ms <= 250)})`);
  log(
    `- the shim's own share of a delta poll, leaders left out, p99 ≤ 100 ms (issue 44): ${fmt(r100.ownShareP99Ms)} ms (${verdict(r100.ownShareP99Ms <= 100)})`,
  );
  log(`- RSS ≤ 400 MB: ${fmt(r100.rssMiB)} MiB = ${fmt((r100.rssMiB * 2 ** 20) / 1e6)} MB (${verdict(r100.rssMiB * 2 ** 20 <= 400e6)})`);
}
const r250 = at(250_000);
if (r250) {
  const charged = Object.entries(r250.budgetsMiB);
  const total = charged.reduce((sum, [, mib]) => sum + mib, 0);
  log(
    `- 250,000 users work at all: ${r250.deltaPolls} delta polls answered (${fmt(r250.deltaBytesMean)} B a delta, mean), RSS ${fmt(r250.rssMiB)} MiB; budgets charged ${fmt(total, 1)} MiB (${charged.map(([b, mib]) => `${b} ${fmt(mib, 1)}`).join(', ')})`,
  );
}
log(
  `load average at end: ${os
    .loadavg()
    .map((v) => v.toFixed(2))
    .join(' / ')}`,
);
