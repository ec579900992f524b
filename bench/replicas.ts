import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { Pool } from 'undici';
import { spawnChild, useBuiltChildren, type Child } from './children.js';
import { gcBetween, gcOf, lastUpdateIdOf, median, percentile, send, type GcSoFar, type Req } from './load.js';
import { formatProfile, summariseProfile } from './profile-summary.js';
import { basicAuth, PRESENCE_PATH, type UpstreamStats } from './synthetic-upstream.js';

/**
 * B8, replicas that cost what one costs: the same paced load (`--clients` clients, each
 * polling once per simulated minute with the id of its previous answer, time compressed
 * `--compress`×) against one replica and against two replicas on one Redis, each client's
 * polls alternating between the replicas. Reports the replicas' CPU in total, poll latency
 * p50/p99, full upstream fetches, and answers whose id was below the one the client sent (X1).
 * `node --import tsx bench/replicas.ts [--users 10000] [--clients 1000] [--warmup 3] [--minutes 3] [--rounds 1] [--profile DIR]`
 * Each phase runs `--warmup` simulated minutes before its `--minutes` measured ones: a shim's
 * optimising compiler is busy for its first 2–3 simulated minutes (about 30 s of wall time), and
 * every process compiles its own code, so a shorter warm-up counts a start-up cost against the
 * second replica that a long-running deployment pays once (bench/RESULTS.md, B8).
 * With `--rounds R`, one replica and two are measured in turn R times, and the verdict is on the
 * median of the rounds' ratios.
 * With `--profile DIR`, each replica's measured minutes are CPU-profiled into
 * DIR/replicas-<n>-<i>.cpuprofile, and each profile's summary is printed.
 */

const { values: flags } = parseArgs({
  options: {
    users: { type: 'string' },
    clients: { type: 'string' },
    warmup: { type: 'string' },
    minutes: { type: 'string' },
    compress: { type: 'string' },
    replicas: { type: 'string' },
    rounds: { type: 'string' },
    profile: { type: 'string' },
  },
  strict: true,
});
await useBuiltChildren();
if (flags.profile) mkdirSync(flags.profile, { recursive: true });
const users = Number(flags.users ?? 10_000);
const clients = Number(flags.clients ?? 1_000);
const warmup = Number(flags.warmup ?? 3);
const minutes = Number(flags.minutes ?? 3);
const compress = Number(flags.compress ?? 5);
const most = Number(flags.replicas ?? 2);
const rounds = Number(flags.rounds ?? 1);
const minuteMs = 60_000 / compress;
const coalesceMs = Math.round(5_000 / compress);
const redisUrl = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const form = { 'content-type': 'application/x-www-form-urlencoded', host: 'chat.example.com' };

const presenceReq = (caller: number, lastUpdateId: number): Req => ({
  method: 'POST',
  path: PRESENCE_PATH,
  headers: { ...form, authorization: basicAuth(caller), 'accept-encoding': 'gzip' },
  body: `status=active&last_update_id=${lastUpdateId}`,
});

interface Outcome {
  replicas: number;
  shimCpuMs: number;
  upstreamCpuMs: number;
  polls: number;
  p50Ms: number;
  p99Ms: number;
  fullFetches: number;
  backwards: number;
  errors: number;
  /** Garbage collection pauses over the measured minutes, every replica's together: ms, and how many, by kind. */
  gc: Record<string, { ms: number; count: number }>;
}

async function phase(up: Child, n: number): Promise<Outcome> {
  const prefix = `zcs-bench:${randomBytes(4).toString('hex')}:`;
  const shims: Child[] = [];
  for (let i = 0; i < n; i++) shims.push(await spawnChild('shim-process.ts', [up.url, String(coalesceMs), 'warn', redisUrl, prefix]));
  const pools = shims.map((s) => new Pool(s.url, { connections: 64, pipelining: 1, keepAliveTimeout: 60_000 }));
  try {
    const prime = await send(pools[0]!, presenceReq(0, -1), false, true);
    const firstId = lastUpdateIdOf(prime.tail) ?? -1;
    const lastId = new Array<number>(clients).fill(firstId);
    const busy = new Uint8Array(clients);
    const latencies: number[] = [];
    let backwards = 0;
    let errors = 0;
    let before: UpstreamStats | undefined;
    let gcBefore: GcSoFar[] = [];
    const inflight = new Set<Promise<void>>();
    const t0 = performance.now();
    const total = clients * (warmup + minutes);
    let fired = 0;
    while (fired < total) {
      const due = Math.min(total, Math.floor(((performance.now() - t0) / minuteMs) * clients) + 1);
      while (fired < due) {
        const minute = Math.floor(fired / clients);
        const client = fired % clients;
        fired++;
        if (minute === warmup && client === 0) {
          before = await up.call<UpstreamStats>('stats');
          await Promise.all([up.call('cpu'), ...shims.map((s) => s.call('cpu'))]);
          gcBefore = await Promise.all(shims.map((s) => gcOf(s.url)));
          if (flags.profile) await Promise.all(shims.map((s) => s.call('profile-start')));
        }
        if (busy[client]) continue;
        busy[client] = 1;
        const sent = lastId[client]!;
        // Each client's polls alternate between the replicas, as behind a round-robin balancer.
        const pool = pools[(client + minute) % n]!;
        const p = send(pool, presenceReq(client, sent), false, true)
          .then((s) => {
            const id = lastUpdateIdOf(s.tail);
            if (s.status !== 200 || id === undefined) errors++;
            else {
              if (id < sent) backwards++;
              lastId[client] = id;
            }
            if (minute >= warmup) latencies.push(s.ms);
          })
          .catch(() => void errors++) // counted: a failed poll is a figure of this bench
          .finally(() => {
            busy[client] = 0;
            inflight.delete(p);
          });
        inflight.add(p);
      }
      await new Promise((r) => setTimeout(r, 2));
    }
    await Promise.all(inflight);
    if (flags.profile) {
      const files = await Promise.all(
        shims.map((s, i) => s.call<string>('profile-stop', { file: join(flags.profile!, `replicas-${n}-${i}.cpuprofile`) })),
      );
      for (const file of files) process.stderr.write(`${file}\n${formatProfile(summariseProfile(file, 15))}\n`);
    }
    const [after, upstreamCpuMs, ...shimCpu] = await Promise.all([
      up.call<UpstreamStats>('stats'),
      up.call<number>('cpu'),
      ...shims.map((s) => s.call<number>('cpu')),
    ]);
    const gcAfter = await Promise.all(shims.map((s) => gcOf(s.url)));
    const gc: Outcome['gc'] = {};
    shims.forEach((_, i) => {
      for (const [kind, k] of Object.entries(gcBetween(gcBefore[i]!, gcAfter[i]!).byKind)) {
        gc[kind] ??= { ms: 0, count: 0 };
        const sum = gc[kind]!;
        sum.ms = Math.round(sum.ms + k.seconds * 1000);
        sum.count += k.count;
      }
    });
    const sorted = Float64Array.from(latencies).sort();
    return {
      replicas: n,
      shimCpuMs: Math.round(shimCpu.reduce((a, b) => a + b, 0)),
      upstreamCpuMs: Math.round(upstreamCpuMs),
      polls: latencies.length,
      p50Ms: +percentile(sorted, 50).toFixed(2),
      p99Ms: +percentile(sorted, 99).toFixed(2),
      fullFetches: after.presenceFull - before!.presenceFull,
      backwards,
      errors,
      gc,
    };
  } finally {
    await Promise.all(pools.map((p) => p.close()));
    await Promise.all(shims.map((s) => s.stop()));
    const admin = new Redis(redisUrl);
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length) await admin.unlink(...keys);
    admin.disconnect();
  }
}

const up = await spawnChild('upstream-process.ts', ['2.1', String(users), '0.02', '60000']);
try {
  await up.call('clock', { minuteMs });
  await up.call('churn', { on: true });
  // Each round measures one replica, then two (…), in turn: CPU figures move by a third from
  // one minute to the next on a shared machine, so a ratio is taken within a round, and the
  // verdict on the median of the rounds' ratios.
  const ratios = new Map<number, Array<{ cpu: number; p99: number; backwards: number }>>();
  for (let round = 1; round <= rounds; round++) {
    const results: Outcome[] = [];
    for (let n = 1; n <= most; n++) results.push(await phase(up, n));
    const one = results[0]!;
    for (const r of results) {
      const cpu = r.shimCpuMs / one.shimCpuMs;
      const p99 = r.p99Ms / one.p99Ms;
      console.log(JSON.stringify({ round, ...r, cpuVsOne: +cpu.toFixed(2), p99VsOne: +p99.toFixed(2) }));
      if (r.replicas > 1) ratios.set(r.replicas, [...(ratios.get(r.replicas) ?? []), { cpu, p99, backwards: r.backwards }]);
    }
  }
  // B8: N replicas cost ≤ 1.2× one replica's CPU in total for the same load, p99 within 1.2×.
  for (const [n, rs] of ratios) {
    const cpu = median(rs.map((r) => r.cpu));
    const p99 = median(rs.map((r) => r.p99));
    const backwards = rs.reduce((a, r) => a + r.backwards, 0);
    const ok = cpu <= 1.2 && p99 <= 1.2 && backwards === 0;
    const each =
      rounds > 1 ? ` (rounds: CPU ${rs.map((r) => r.cpu.toFixed(2)).join(', ')}; p99 ${rs.map((r) => r.p99.toFixed(2)).join(', ')})` : '';
    console.log(
      `target, ${n} replicas vs one${rounds > 1 ? `, median of ${rounds} rounds` : ''}: CPU ${cpu.toFixed(2)}× (≤ 1.2×), p99 ${p99.toFixed(2)}× (≤ 1.2×), ids below the client's ${backwards}: ${ok ? 'met' : 'NOT met'}${each}`,
    );
  }
} finally {
  await up.stop();
}
