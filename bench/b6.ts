import os from 'node:os';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { spawnChild, type Child } from './children.js';
import { closedLoop, lastUpdateIdOf, pacedClients, send, type Req } from './load.js';
import { basicAuth, PRESENCE_PATH } from './synthetic-upstream.js';

/**
 * `npm run bench -- b6`: B6 alone, as `npm run bench` measures it (a fresh shim on a churning
 * 10,000-user 2.1 upstream, a primed full poll, then the B3 delta phase and the mixed phase with
 * the event-loop monitor on; the figure is the larger maximum of the two, in wall time and in
 * main-thread CPU), without B1, B2, B4 and B5 before it: about 30 s a run.
 *
 * `--arm ARGS` (repeatable): node flags for the shim of one variant ('' for none); each round runs
 * every arm once, in turn (A B A B …), so a shared machine's load falls on all of them alike.
 * `--runs N` rounds (default 5); `--phase-seconds S` (default 10, as the full bench);
 * `--cpu-prof DIR` writes a CPU profile of each shim process there; `--b2-seconds 30` first runs
 * the full bench's B2 real-time phase on the same shim (1,000 callers at one poll a minute), as
 * `npm run bench` does before B3 and B6 (0, the default, leaves it out).
 */
const { values } = parseArgs({
  options: {
    arm: { type: 'string', multiple: true },
    runs: { type: 'string' },
    'phase-seconds': { type: 'string' },
    users: { type: 'string' },
    'cpu-prof': { type: 'string' },
    'b2-seconds': { type: 'string' },
  },
  strict: true,
});
const arms = values.arm?.length ? values.arm : [''];
const runs = Number(values.runs ?? 5);
const phaseMs = Number(values['phase-seconds'] ?? 10) * 1000;
const users = Number(values.users ?? 10_000);
const b2Seconds = Number(values['b2-seconds'] ?? 0);
const connections = 10;
const coalesceMs = 5_000;
const warmMs = Math.min(2000, phaseMs / 2);
const log = (s: string) => process.stdout.write(`${s}\n`);
const round = (v: number) => Math.round(v * 10) / 10;

interface Blocks {
  maxMs: number;
  maxCpuInGapMs: number;
  gapOfMaxCpuMs: number;
}

const form = { 'content-type': 'application/x-www-form-urlencoded' };
const presenceReq = (caller: number, lastUpdateId: number | undefined, extra: Record<string, string> = {}): Req => ({
  method: 'POST',
  path: PRESENCE_PATH,
  headers: { ...form, authorization: basicAuth(caller), ...extra },
  body: lastUpdateId === undefined ? 'status=active' : `status=active&last_update_id=${lastUpdateId}`,
});

async function oneRun(upUrl: string, nodeArgs: string[]) {
  const shim: Child = await spawnChild('shim-process.ts', [upUrl, String(coalesceMs), 'warn'], { nodeArgs });
  try {
    const pool = new Pool(shim.url, { connections: 1 });
    const prime = await send(pool, presenceReq(0, -1), true);
    await pool.close();
    const id0 = lastUpdateIdOf(prime.tail);
    if (id0 === undefined || prime.status !== 200) throw new Error(`priming poll failed: HTTP ${prime.status}`);
    if (b2Seconds > 0)
      await pacedClients({
        url: shim.url,
        clients: 1_000,
        minuteMs: 60_000,
        minutes: 1,
        connections: 128,
        initialId: id0,
        limitMs: b2Seconds * 1000,
        request: (c, id) => presenceReq(c, id, { 'accept-encoding': 'gzip' }),
        keepBody: () => false,
      });
    const delta = (w: number) => presenceReq(w, id0);
    await closedLoop(shim.url, connections, warmMs, delta);
    await shim.call('eld-start');
    await closedLoop(shim.url, connections, phaseMs, delta);
    const d = await shim.call<Blocks>('eld-stop');
    await shim.call('eld-start');
    await closedLoop(shim.url, connections, phaseMs, (w, n) => {
      const gzip = { 'accept-encoding': 'gzip' };
      return n % 10 < 8 ? presenceReq(w, id0, gzip) : n % 10 === 8 ? presenceReq(w, -1, gzip) : presenceReq(w, undefined, gzip);
    });
    const m = await shim.call<Blocks>('eld-stop');
    return {
      wallMs: Math.max(d.maxMs, m.maxMs),
      cpuMs: Math.max(d.maxCpuInGapMs, m.maxCpuInGapMs),
      deltaCpuMs: d.maxCpuInGapMs,
      mixedCpuMs: m.maxCpuInGapMs,
    };
  } finally {
    await shim.stop();
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const h = s.length >> 1;
  return s.length % 2 ? s[h]! : (s[h - 1]! + s[h]!) / 2;
};

const up = await spawnChild('upstream-process.ts', ['2.1', String(users), '0.02', '60000']);
const results: Record<string, { wallMs: number; cpuMs: number }[]> = Object.fromEntries(arms.map((a) => [a, []]));
try {
  await up.call('clock', { minuteMs: 60_000 });
  await up.call('churn', { on: true });
  for (let r = 0; r < runs; r++) {
    for (const arm of arms) {
      const nodeArgs = arm.split(' ').filter(Boolean);
      if (values['cpu-prof']) nodeArgs.push('--cpu-prof', `--cpu-prof-dir=${resolve(values['cpu-prof'])}`);
      const res = await oneRun(up.url, nodeArgs);
      results[arm]!.push(res);
      log(
        `run ${r + 1} [${arm || 'default'}]: wall ${round(res.wallMs)} ms, main-thread CPU ${round(res.cpuMs)} ms (delta phase ${round(res.deltaCpuMs)}, mixed ${round(res.mixedCpuMs)}); load ${os
          .loadavg()
          .map((l) => l.toFixed(2))
          .join(' ')}`,
      );
    }
  }
} finally {
  await up.stop();
}
for (const arm of arms) {
  const rs = results[arm]!;
  const w = rs.map((x) => x.wallMs);
  const c = rs.map((x) => x.cpuMs);
  log(
    `B6 [${arm || 'default'}] ${rs.length} runs: CPU median ${round(median(c))} ms (${round(Math.min(...c))}–${round(Math.max(...c))}), wall median ${round(median(w))} ms (${round(Math.min(...w))}–${round(Math.max(...w))})`,
  );
}
