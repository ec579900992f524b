import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { gunzipSync } from 'node:zlib';
import { Redis } from 'ioredis';
import { Pool } from 'undici';
import { spawnChild, useBuiltChildren, type Child } from './children.js';
import { answersOf, gcBetween, gcOf, lastUpdateIdOf, median, percentile, send, type GcSoFar, type Req } from './load.js';
import { formatProfile, summariseProfile } from './profile-summary.js';
import { basicAuth, PRESENCE_PATH, userIdOf, type UpstreamStats } from './synthetic-upstream.js';

/**
 * B8, replicas on one Redis under round robin: the same paced load (`--clients` clients, each
 * polling modern presence once per simulated minute with the presence_last_update_id of its
 * previous answer, time compressed `--compress`×) against one replica, then two, … up to
 * `--replicas` (separate processes on one Redis), each poll of a client sent to the next replica
 * in turn, as behind a round-robin balancer. The upstream is a synthetic Zulip 2.1 in which
 * `--churn` of the users (default 0.02: 2 %) change per simulated minute.
 *
 * Over the measured minutes, for each number of replicas:
 * - delta polls (every measured poll sends the id of its previous answer, so all of them)
 *   answered with full data: an answer at least half the size of the full modern answer, and
 *   beside it the replicas' own count of `resync` answers (presence_answers_total);
 * - B1's bytes per poll (the mean body, decoded, and as sent with gzip) against one replica's;
 * - the replicas' CPU in total, poll latency p50/p99, full upstream fetches, answers whose id
 *   was below the one the client sent (X1).
 * Then convergence: the churn stops, every client polls on for 2 simulated minutes, one user
 * (not a polling client) reports active: the last change. Each client's polls sent after it are
 * counted until one answer shows that report; the figure is that count, at most over clients.
 *
 * `node --import tsx bench/replicas.ts [--users 10000] [--clients 1000] [--churn 0.02] [--warmup 3]
 *   [--minutes 3] [--compress 5] [--replicas 3] [--rounds 1] [--profile DIR]`
 * Each phase runs `--warmup` simulated minutes before its `--minutes` measured ones: a shim's
 * optimising compiler is busy for its first 2–3 simulated minutes (about 30 s of wall time), and
 * every process compiles its own code, so a shorter warm-up counts a start-up cost against the
 * second replica that a long-running deployment pays once.
 * With `--rounds R`, each number of replicas is measured in turn R times, and the verdict is on
 * the median of the rounds' ratios.
 * With `--profile DIR`, each replica's measured minutes are CPU-profiled into
 * DIR/replicas-<n>-<i>.cpuprofile, and each profile's summary is printed.
 * Redis: REDIS_URL (default redis://127.0.0.1:6379); every phase uses a key prefix of its own
 * and deletes its keys at the end.
 */

const { values: flags } = parseArgs({
  options: {
    users: { type: 'string' },
    clients: { type: 'string' },
    warmup: { type: 'string' },
    minutes: { type: 'string' },
    compress: { type: 'string' },
    churn: { type: 'string' },
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
/** Fraction of the users changing per simulated minute. */
const churn = Number(flags.churn ?? 0.02);
const most = Number(flags.replicas ?? 3);
const rounds = Number(flags.rounds ?? 1);
const minuteMs = 60_000 / compress;
const coalesceMs = Math.round(5_000 / compress);
const redisUrl = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const form = { 'content-type': 'application/x-www-form-urlencoded', host: 'chat.example.com' };
/** Simulated minutes of polling after the churn stops, before the last change. */
const SETTLE_MINUTES = 2;
/** Simulated minutes of polling after the last change: up to this many polls per client. */
const AFTER_MINUTES = 5;
/** The user whose report is the last change: the last of the realm, never a polling client. */
const MARKED_USER = users - 1;
if (MARKED_USER < clients) throw new Error('--users must be above --clients (the last user is watched, not polling)');

const presenceReq = (caller: number, lastUpdateId: number): Req => ({
  method: 'POST',
  path: PRESENCE_PATH,
  headers: { ...form, authorization: basicAuth(caller), 'accept-encoding': 'gzip' },
  body: `status=active&last_update_id=${lastUpdateId}`,
});

interface Convergence {
  /** Clients that polled after the last change. */
  clients: number;
  /** How many clients first saw the change in their 1st, 2nd, … poll after it. */
  byPolls: Record<number, number>;
  /** The most polls any client needed. */
  max: number;
  /** Clients that had not seen it after AFTER_MINUTES polls. */
  missing: number;
}

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
  /** Measured polls answered with full data (at least half the full answer's size). */
  fullAnswers: number;
  /** fullAnswers ÷ polls (every measured poll is a delta poll: it sends the id of its previous answer). */
  fullShare: number;
  /** The replicas' presence_answers_total over the measured minutes, by kind. */
  answers: Record<string, number>;
  /** B1's figure: mean decoded body bytes per measured poll; and as sent (gzip). */
  meanBytes: number;
  meanSentBytes: number;
  /** The full modern answer's size (the priming poll's), decoded. */
  fullBytes: number;
  convergence: Convergence;
  /** Garbage collection pauses over the measured minutes, every replica's together: ms, and how many, by kind. */
  gc: Record<string, { ms: number; count: number }>;
}

/** The marked user's active_timestamp in a presence answer's body (decoded), if the answer holds them. */
function markedActive(body: Buffer, encoding: string | undefined): number | undefined {
  const json = JSON.parse((encoding === 'gzip' ? gunzipSync(body) : body).toString('utf8')) as {
    presences?: Record<string, { active_timestamp?: number }>;
  };
  return json.presences?.[String(userIdOf(MARKED_USER))]?.active_timestamp;
}

async function phase(up: Child, n: number): Promise<Outcome> {
  const prefix = `zcs-bench:${randomBytes(4).toString('hex')}:`;
  await up.call('churn', { on: true });
  const shims: Child[] = [];
  for (let i = 0; i < n; i++) shims.push(await spawnChild('shim-process.ts', [up.url, String(coalesceMs), 'warn', redisUrl, prefix]));
  const pools = shims.map((s) => new Pool(s.url, { connections: 64, pipelining: 1, keepAliveTimeout: 60_000 }));
  try {
    const prime = await send(pools[0]!, presenceReq(0, -1), false, true);
    const firstId = lastUpdateIdOf(prime.tail) ?? -1;
    const fullBytes = prime.rawBytes;
    const lastId = new Array<number>(clients).fill(firstId);
    const busy = new Uint8Array(clients);
    const latencies: number[] = [];
    let backwards = 0;
    let errors = 0;
    let fullAnswers = 0;
    let rawBytes = 0;
    let sentBytes = 0;
    let before: UpstreamStats | undefined;
    let gcBefore: GcSoFar[] = [];
    let answersBefore: Array<Record<string, number>> = [];
    let measured:
      | { after: UpstreamStats; upstreamCpuMs: number; shimCpu: number[]; gcAfter: GcSoFar[]; answersAfter: Array<Record<string, number>> }
      | undefined;
    // The last change: when it was made (the simulated second), and each client's polls since.
    let mark: number | undefined;
    const sinceMark = new Uint8Array(clients);
    const sawMark = new Uint8Array(clients);
    const inflight = new Set<Promise<void>>();
    const t0 = performance.now();
    const endMeasured = warmup + minutes;
    const markAt = endMeasured + SETTLE_MINUTES;
    const total = clients * (markAt + AFTER_MINUTES);
    let fired = 0;
    while (fired < total) {
      const due = Math.min(total, Math.floor(((performance.now() - t0) / minuteMs) * clients) + 1);
      while (fired < due) {
        const minute = Math.floor(fired / clients);
        const client = fired % clients;
        fired++;
        if (client === 0 && minute === warmup) {
          before = await up.call<UpstreamStats>('stats');
          await Promise.all([up.call('cpu'), ...shims.map((s) => s.call('cpu'))]);
          gcBefore = await Promise.all(shims.map((s) => gcOf(s.url)));
          answersBefore = await Promise.all(shims.map((s) => answersOf(s.url)));
          if (flags.profile) await Promise.all(shims.map((s) => s.call('profile-start')));
        }
        if (client === 0 && minute === endMeasured) {
          const [after, upstreamCpuMs, ...shimCpu] = await Promise.all([
            up.call<UpstreamStats>('stats'),
            up.call<number>('cpu'),
            ...shims.map((s) => s.call<number>('cpu')),
          ]);
          const gcAfter = await Promise.all(shims.map((s) => gcOf(s.url)));
          const answersAfter = await Promise.all(shims.map((s) => answersOf(s.url)));
          measured = { after, upstreamCpuMs, shimCpu, gcAfter, answersAfter };
          if (flags.profile) {
            const files = await Promise.all(
              shims.map((s, i) => s.call<string>('profile-stop', { file: join(flags.profile!, `replicas-${n}-${i}.cpuprofile`) })),
            );
            for (const file of files) process.stderr.write(`${file}\n${formatProfile(summariseProfile(file, 15))}\n`);
          }
          await up.call('churn', { on: false });
        }
        if (client === 0 && minute === markAt) mark = await up.call<number>('touch', { user: MARKED_USER });
        if (busy[client]) continue;
        busy[client] = 1;
        const sent = lastId[client]!;
        const inMeasured = minute >= warmup && minute < endMeasured;
        const watching = mark !== undefined && !sawMark[client];
        const pollsSinceMark = mark !== undefined ? ++sinceMark[client]! : 0;
        const watched = mark;
        // Each client's polls go to the replicas in turn, as behind a round-robin balancer.
        const pool = pools[(client + minute) % n]!;
        const p = send(pool, presenceReq(client, sent), watching, true)
          .then((s) => {
            const id = lastUpdateIdOf(s.tail);
            if (s.status !== 200 || id === undefined) errors++;
            else {
              if (id < sent) backwards++;
              lastId[client] = id;
            }
            if (inMeasured) {
              latencies.push(s.ms);
              rawBytes += s.rawBytes;
              sentBytes += s.bytes;
              if (s.rawBytes * 2 >= fullBytes) fullAnswers++;
            }
            if (watching && s.status === 200 && s.body && !sawMark[client]) {
              const active = markedActive(s.body, s.encoding);
              if (active !== undefined && active >= watched!) sawMark[client] = pollsSinceMark;
            }
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
    const { after, upstreamCpuMs, shimCpu, gcAfter, answersAfter } = measured!;
    const gc: Outcome['gc'] = {};
    shims.forEach((_, i) => {
      for (const [kind, k] of Object.entries(gcBetween(gcBefore[i]!, gcAfter[i]!).byKind)) {
        gc[kind] ??= { ms: 0, count: 0 };
        const sum = gc[kind]!;
        sum.ms = Math.round(sum.ms + k.seconds * 1000);
        sum.count += k.count;
      }
    });
    const answers: Record<string, number> = {};
    shims.forEach((_, i) => {
      for (const [kind, v] of Object.entries(answersAfter[i]!)) answers[kind] = (answers[kind] ?? 0) + v - (answersBefore[i]![kind] ?? 0);
    });
    const polled = [...sinceMark].filter((k) => k > 0).length;
    const byPolls: Record<number, number> = {};
    for (const k of sawMark) if (k > 0) byPolls[k] = (byPolls[k] ?? 0) + 1;
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
      fullAnswers,
      fullShare: latencies.length ? fullAnswers / latencies.length : Number.NaN,
      answers,
      meanBytes: Math.round(rawBytes / latencies.length),
      meanSentBytes: Math.round(sentBytes / latencies.length),
      fullBytes,
      convergence: {
        clients: polled,
        byPolls,
        max: Math.max(0, ...sawMark),
        missing: [...sawMark].filter((k, c) => k === 0 && sinceMark[c]! > 0).length,
      },
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

const up = await spawnChild('upstream-process.ts', ['2.1', String(users), String(churn), '60000']);
try {
  await up.call('clock', { minuteMs });
  // Each round measures one replica, then two (…), in turn: CPU figures move by a third from
  // one minute to the next on a shared machine, so a ratio is taken within a round, and the
  // verdict on the median of the rounds' ratios.
  interface Ratios {
    cpu: number;
    p99: number;
    bytes: number;
    backwards: number;
    fullShare: number;
    convergence: number;
    convergenceOne: number;
    missing: number;
  }
  const ratios = new Map<number, Ratios[]>();
  for (let round = 1; round <= rounds; round++) {
    const results: Outcome[] = [];
    for (let n = 1; n <= most; n++) results.push(await phase(up, n));
    const one = results[0]!;
    for (const r of results) {
      const cpu = r.shimCpuMs / one.shimCpuMs;
      const p99 = r.p99Ms / one.p99Ms;
      const bytes = r.meanBytes / one.meanBytes;
      console.log(JSON.stringify({ round, ...r, cpuVsOne: +cpu.toFixed(2), p99VsOne: +p99.toFixed(2), bytesVsOne: +bytes.toFixed(3) }));
      const entry = {
        cpu,
        p99,
        bytes,
        backwards: r.backwards,
        fullShare: r.fullShare,
        convergence: r.convergence.max,
        convergenceOne: one.convergence.max,
        missing: r.convergence.missing,
      };
      ratios.set(r.replicas, [...(ratios.get(r.replicas) ?? []), entry]);
    }
  }
  const pct = (v: number) => `${(v * 100).toFixed(2)} %`;
  for (const [n, rs] of ratios) {
    const fullShare = median(rs.map((r) => r.fullShare));
    const missing = rs.reduce((a, r) => a + r.missing, 0);
    const convergence = Math.max(...rs.map((r) => r.convergence));
    if (n === 1) {
      console.log(
        `one replica${rounds > 1 ? `, median of ${rounds} rounds` : ''}: delta polls answered with full data ${pct(fullShare)}; convergence after the last change within ${convergence} poll(s)${missing ? `, ${missing} client(s) never saw it` : ''}`,
      );
      continue;
    }
    // B8: N replicas cost ≤ 1.2× one replica's CPU in total for the same load, p99 within 1.2×.
    const cpu = median(rs.map((r) => r.cpu));
    const p99 = median(rs.map((r) => r.p99));
    const backwards = rs.reduce((a, r) => a + r.backwards, 0);
    const costMet = cpu <= 1.2 && p99 <= 1.2 && backwards === 0;
    // B8 under round robin: ≤ 1 % of delta polls answered with full data; B1's bytes per poll within 10 % of
    // one replica's; convergence after the last change in as many polls as one replica.
    const bytes = median(rs.map((r) => r.bytes));
    const convergenceOne = Math.max(...rs.map((r) => r.convergenceOne));
    const vouchMet = fullShare <= 0.01 && Math.abs(bytes - 1) <= 0.1 && convergence <= convergenceOne && missing === 0;
    const each =
      rounds > 1 ? ` (rounds: CPU ${rs.map((r) => r.cpu.toFixed(2)).join(', ')}; p99 ${rs.map((r) => r.p99.toFixed(2)).join(', ')})` : '';
    console.log(
      `target, ${n} replicas vs one${rounds > 1 ? `, median of ${rounds} rounds` : ''}: CPU ${cpu.toFixed(2)}× (≤ 1.2×), p99 ${p99.toFixed(2)}× (≤ 1.2×), ids below the client's ${backwards}: ${costMet ? 'met' : 'NOT met'}${each}`,
    );
    console.log(
      `target, ${n} replicas round robin: delta polls answered with full data ${pct(fullShare)} (≤ 1 %), bytes per poll ${bytes.toFixed(2)}× one replica's (within 10 %), convergence after the last change within ${convergence} poll(s) (one replica: ${convergenceOne})${missing ? `, ${missing} client(s) never saw it` : ''}: ${vouchMet ? 'met' : 'NOT met'}`,
    );
  }
} finally {
  await up.stop();
}
