import http from 'node:http';
import { Writable } from 'node:stream';
import { createLogger } from '../../src/observability/logger.js';
import { createShim } from '../../src/server.js';
import { send, type Answer } from './http-client.js';
import { findSecret } from './secrets.js';
import { testConfig } from './shim.js';
import { SyntheticZulip, type SyntheticEra } from './synthetic-zulip.js';

/**
 * Sustained load: many simulated clients of a large realm against one shim in front of the
 * synthetic upstream, mixed presence (full once, then deltas), own-profile and pass-through
 * traffic (messages, short long polls) for a set time. Reports latency percentiles, errors the
 * upstream did not cause, RSS after warm-up against RSS at the end, and whether sampled clients
 * that merged every answer hold exactly the upstream's data once it goes quiet (P6).
 */

export interface SoakOptions {
  seconds: number;
  clients: number;
  users: number;
  era?: SyntheticEra;
  /** P9 window of the shim (the default config's is 5000). */
  coalesceMs?: number;
  /** RSS is measured from the end of this (default: a fifth of the run, at most 15 s). */
  warmupSeconds?: number;
  /** Clients that keep and merge the whole presence map, checked at the end. */
  sampleClients?: number;
  /** Pause between one client's requests, ms. */
  thinkMs?: [number, number];
  /** Share of upstream answers that are its own 429s. */
  faultRate?: number;
}

export type Kind = 'presence_full' | 'presence_delta' | 'own_profile' | 'messages' | 'events';

export interface Percentiles {
  n: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
}

export interface SoakReport {
  seconds: number;
  clients: number;
  users: number;
  requests: number;
  requestsPerSecond: number;
  /** `all`: every kind but the long polls, which the upstream holds on purpose. */
  latency: Record<Kind | 'all', Percentiles>;
  upstreamCausedErrors: number;
  /** Errors the upstream did not cause (first few described in `errorSamples`). */
  unexplainedErrors: number;
  errorSamples: string[];
  rssMiB: { start: number; afterWarmup: number; end: number; peak: number };
  /** RSS at the end of each minute, MiB. */
  rssCurveMiB: number[];
  /** (end − after warm-up) / after warm-up. */
  rssGrowth: number;
  heapMiB: { afterWarmup: number; end: number };
  /** Buffers outside the JS heap (sockets, bodies). */
  externalMiB: { afterWarmup: number; end: number };
  /** Users whose data a sampled client holds differently from the upstream, after the quiet period. */
  sampleMismatches: string[];
  /** Rounds of the quiet period polled until the sampled clients held the upstream's data (2 on an idle machine). */
  quietRounds: number;
  logLines: number;
  warnLines: number;
  /** The distinct messages of warn lines (up to 10), each with how often it was logged. */
  warnMessages: Record<string, number>;
  /** Log lines at error or above, and any that showed a credential. */
  logProblems: string[];
}

/** Latencies in log-spaced buckets (5% wide): bounded memory whatever the request count. */
class Histogram {
  private readonly counts = new Map<number, number>();
  n = 0;
  max = 0;
  add(ms: number): void {
    const b = Math.max(0, Math.ceil(Math.log(Math.max(ms, 0.01) / 0.01) / Math.log(1.05)));
    this.counts.set(b, (this.counts.get(b) ?? 0) + 1);
    this.n++;
    if (ms > this.max) this.max = ms;
  }
  merge(o: Histogram): void {
    for (const [b, c] of o.counts) this.counts.set(b, (this.counts.get(b) ?? 0) + c);
    this.n += o.n;
    this.max = Math.max(this.max, o.max);
  }
  quantile(q: number): number {
    if (this.n === 0) return 0;
    const want = Math.ceil(q * this.n);
    let seen = 0;
    for (const b of [...this.counts.keys()].sort((x, y) => x - y)) {
      seen += this.counts.get(b)!;
      if (seen >= want) return Math.min(0.01 * 1.05 ** b, this.max);
    }
    return this.max;
  }
  summary(): Percentiles {
    const r = (x: number) => Math.round(x * 10) / 10;
    return { n: this.n, p50: r(this.quantile(0.5)), p95: r(this.quantile(0.95)), p99: r(this.quantile(0.99)), max: r(this.max) };
  }
}

const MiB = 1024 * 1024;
/** How long the quiet period may poll for the sampled clients to hold the upstream's data. */
const QUIET_DEADLINE_MS = 20_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const gc = () => (globalThis as { gc?: () => void }).gc?.();

type Entry = { active_timestamp: number; idle_timestamp: number };

export async function runSoak(o: SoakOptions): Promise<SoakReport> {
  const coalesceMs = o.coalesceMs ?? 5000;
  const warmup = o.warmupSeconds ?? Math.min(15, o.seconds / 5);
  const [thinkMin, thinkMax] = o.thinkMs ?? [250, 1000];
  const sampleCount = Math.min(o.sampleClients ?? 5, o.clients);
  const rebuildMs = Math.min(1000, Math.max(100, coalesceMs / 2));
  const upstream = new SyntheticZulip({
    users: o.users,
    era: o.era,
    faultRate: o.faultRate ?? 0.002,
    changesPerSecond: Math.max(20, o.users / 200),
    rebuildMs,
  });
  await upstream.start();

  // The shim as in production: info-level request lines, serialised and written (here: counted,
  // and a sample of them searched for credentials).
  let logLines = 0;
  let warnLines = 0;
  const warnMessages: Record<string, number> = {};
  const logProblems: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      logLines++;
      const line = String(chunk);
      const level = Number(/"level":(\d+)/.exec(line)?.[1] ?? 0);
      if (level >= 40) {
        warnLines++;
        const msg = /"msg":"((?:[^"\\]|\\.)*)"/.exec(line)?.[1] ?? '?';
        if (msg in warnMessages || Object.keys(warnMessages).length < 10) warnMessages[msg] = (warnMessages[msg] ?? 0) + 1;
      }
      if (level >= 40 || logLines % 50 === 0) {
        const secret = findSecret(line);
        if (secret) logProblems.push(`credential in a log line: ${secret}`);
        if (level >= 50 && logProblems.length < 20) logProblems.push(line.slice(0, 300));
      }
      cb();
    },
  });
  const config = testConfig(upstream.url, { presence: { coalesceMs } });
  const shim = createShim({ config, log: createLogger('info', sink), target: upstream.url, upstreamId: upstream.url });
  const { url } = await shim.listen(0, '127.0.0.1');
  const agent = new http.Agent({ keepAlive: true, maxSockets: o.clients + 16 });

  const histograms = new Map<Kind, Histogram>();
  const hist = (k: Kind) => histograms.get(k) ?? histograms.set(k, new Histogram()).get(k)!;
  let requests = 0;
  let upstreamCaused = 0;
  let unexplained = 0;
  const errorSamples: string[] = [];
  const failed = (what: string) => {
    unexplained++;
    if (errorSamples.length < 10) errorSamples.push(what);
  };

  const started = Date.now();
  const deadline = started + o.seconds * 1000;
  const rss = { start: process.memoryUsage().rss, afterWarmup: 0, end: 0, peak: 0 };
  const heap = { afterWarmup: 0, end: 0 };
  const external = { afterWarmup: 0, end: 0 };
  /** RSS once a minute (MiB), for the curve a long soak prints. */
  const rssCurve: number[] = [];
  let ticks = 0;
  const sampler = setInterval(() => {
    const now = process.memoryUsage().rss;
    rss.peak = Math.max(rss.peak, now);
    if (++ticks % 240 === 0) rssCurve.push(Math.round(now / 2 ** 20));
  }, 250);
  const warmMark = setTimeout(() => {
    gc();
    const m = process.memoryUsage();
    rss.afterWarmup = m.rss;
    heap.afterWarmup = m.heapUsed;
    external.afterWarmup = m.external;
  }, warmup * 1000);

  async function timed(kind: Kind, i: number, out: Parameters<typeof send>[1]): Promise<Answer | undefined> {
    const t0 = performance.now();
    try {
      const a = await send(url, out, { agent, timeoutMs: 30_000 });
      hist(kind).add(performance.now() - t0);
      requests++;
      if (a.status >= 200 && a.status < 300) return a;
      if (a.headers['x-synthetic-fault'] === 'yes') upstreamCaused++;
      else failed(`${kind} (client ${i}): HTTP ${a.status} ${a.body.toString('utf8').slice(0, 160)}`);
      return undefined;
    } catch (e) {
      requests++;
      failed(`${kind} (client ${i}): ${(e as Error).message}`);
      return undefined;
    }
  }

  const ID = /"presence_last_update_id":(-?\d+)/;
  interface Client {
    i: number;
    lastId: number;
    map?: Map<string, Entry>;
  }

  async function presence(c: Client, status: 'active' | 'idle'): Promise<void> {
    const full = c.lastId <= 0;
    const a = await timed(full ? 'presence_full' : 'presence_delta', c.i, {
      method: 'POST',
      path: '/api/v1/users/me/presence',
      headers: { authorization: upstream.auth(c.i), 'content-type': 'application/x-www-form-urlencoded' },
      body: Buffer.from(`status=${status}&last_update_id=${c.lastId}`),
    });
    if (!a) return;
    if (c.map) {
      const body = JSON.parse(a.body.toString('utf8')) as { presences: Record<string, Entry>; presence_last_update_id: number };
      for (const [k, v] of Object.entries(body.presences)) c.map.set(k, v);
      c.lastId = body.presence_last_update_id;
      return;
    }
    // Only the id is needed; it is near the end of the answer.
    const m = ID.exec(a.body.toString('latin1', Math.max(0, a.body.length - 400)));
    if (m) c.lastId = Number(m[1]);
    else failed(`presence (client ${c.i}): no presence_last_update_id`);
  }

  async function runClient(c: Client): Promise<void> {
    await sleep(Math.random() * Math.min(2000, warmup * 500));
    await presence(c, 'active');
    let k = c.i * 7919;
    const next = () => (k = (k * 1_103_515_245 + 12_345) % 2 ** 31);
    while (Date.now() < deadline) {
      await sleep(thinkMin + (next() % Math.max(1, thinkMax - thinkMin)));
      if (Date.now() >= deadline) break;
      const roll = next() % 100;
      if (roll < 55) await presence(c, roll < 45 ? 'active' : 'idle');
      else if (roll < 70)
        await timed('own_profile', c.i, { method: 'GET', path: '/api/v1/users/me', headers: { authorization: upstream.auth(c.i) } });
      else if (roll < 90)
        await timed('messages', c.i, {
          method: 'GET',
          path: '/api/v1/messages?anchor=newest&num_before=20&num_after=0',
          headers: { authorization: upstream.auth(c.i) },
        });
      else
        await timed('events', c.i, {
          method: 'GET',
          path: `/api/v1/events?queue_id=q-${c.i}&last_event_id=-1&hold_ms=${500 + (next() % 1500)}`,
          headers: { authorization: upstream.auth(c.i) },
        });
    }
  }

  const clients: Client[] = Array.from({ length: o.clients }, (_, i) => ({
    i,
    lastId: -1,
    ...(i < sampleCount ? { map: new Map<string, Entry>() } : {}),
  }));
  await Promise.all(clients.map(runClient));
  clearTimeout(warmMark);
  gc();
  const m = process.memoryUsage();
  rss.end = m.rss;
  heap.end = m.heapUsed;
  external.end = m.external;
  if (rss.afterWarmup === 0) {
    rss.afterWarmup = rss.end;
    heap.afterWarmup = heap.end;
    external.afterWarmup = external.end;
  }
  clearInterval(sampler);
  const elapsed = (Date.now() - started) / 1000;

  // Quiet upstream: rounds past the window and the upstream's own rebuild let every change
  // through; sampled clients must then hold exactly the upstream's data (P6). Two rounds on an
  // idle machine; on a busy one a full fetch can outlast them, so more rounds are polled until
  // the data agrees or QUIET_DEADLINE_MS has passed (what is still off then is reported).
  // Their own rows move with each of their polls, so those are left out of the comparison.
  upstream.quiet();
  const samples = clients.filter((c) => c.map);
  const expected = upstream.expectedModern();
  const own = new Set(samples.map((c) => String(upstream.userId(c.i))));
  const mismatches = (): string[] => {
    const out: string[] = [];
    for (const c of samples) {
      for (const [id, want] of expected) {
        if (own.has(id)) continue;
        const got = c.map!.get(id);
        const activeOk = got?.active_timestamp === want.active_timestamp || got?.active_timestamp === want.orActive;
        if (!got || !activeOk || got.idle_timestamp !== want.idle_timestamp) {
          if (out.length < 10) out.push(`client ${c.i}, user ${id}: ${JSON.stringify(got)} ≠ ${JSON.stringify(want)}`);
          else break;
        }
      }
    }
    return out;
  };
  const quietUntil = Date.now() + QUIET_DEADLINE_MS;
  let sampleMismatches: string[] = [];
  let quietRounds = 0;
  do {
    await sleep(coalesceMs + rebuildMs + 200);
    await Promise.all(samples.map((c) => presence(c, 'active')));
    quietRounds++;
    sampleMismatches = mismatches();
  } while (quietRounds < 2 || (sampleMismatches.length > 0 && Date.now() < quietUntil));

  agent.destroy();
  await shim.close();
  await upstream.stop();

  // Long polls are held by the upstream on purpose: left out of the overall figures.
  const all = new Histogram();
  const latency = {} as SoakReport['latency'];
  for (const k of ['presence_full', 'presence_delta', 'own_profile', 'messages', 'events'] as Kind[]) {
    latency[k] = hist(k).summary();
    if (k !== 'events') all.merge(hist(k));
  }
  latency.all = all.summary();
  const mib = (b: number) => Math.round((b / MiB) * 10) / 10;
  return {
    seconds: Math.round(elapsed * 10) / 10,
    clients: o.clients,
    users: o.users,
    requests,
    requestsPerSecond: Math.round(requests / elapsed),
    latency,
    upstreamCausedErrors: upstreamCaused,
    unexplainedErrors: unexplained,
    errorSamples,
    rssMiB: { start: mib(rss.start), afterWarmup: mib(rss.afterWarmup), end: mib(rss.end), peak: mib(rss.peak) },
    rssCurveMiB: rssCurve,
    rssGrowth: Math.round(((rss.end - rss.afterWarmup) / rss.afterWarmup) * 1000) / 1000,
    heapMiB: { afterWarmup: mib(heap.afterWarmup), end: mib(heap.end) },
    externalMiB: { afterWarmup: mib(external.afterWarmup), end: mib(external.end) },
    sampleMismatches,
    quietRounds,
    logLines,
    warnLines,
    warnMessages,
    logProblems,
  };
}

/** The report as a few lines for the console. */
export function describeSoak(r: SoakReport): string {
  const lines = [
    `soak: ${r.clients} clients, ${r.users}-user realm, ${r.seconds} s: ${r.requests} requests (${r.requestsPerSecond}/s)`,
    `  errors the upstream did not cause: ${r.unexplainedErrors}; upstream 429s passed on: ${r.upstreamCausedErrors}`,
    `  latency ms (p50 / p95 / p99 / max):`,
    ...Object.entries(r.latency).map(
      ([k, p]) =>
        `    ${(k === 'all' ? 'all but events' : k).padEnd(15)} n=${String(p.n).padStart(7)}  ${p.p50} / ${p.p95} / ${p.p99} / ${p.max}`,
    ),
    `  RSS MiB: start ${r.rssMiB.start}, after warm-up ${r.rssMiB.afterWarmup}, end ${r.rssMiB.end} (growth ${(r.rssGrowth * 100).toFixed(1)}%), peak ${r.rssMiB.peak}; heap after warm-up ${r.heapMiB.afterWarmup}, end ${r.heapMiB.end}; external ${r.externalMiB.afterWarmup} → ${r.externalMiB.end}`,
    ...(r.rssCurveMiB.length > 1 ? [`  RSS MiB at the end of each minute: ${r.rssCurveMiB.join(' ')}`] : []),
    `  sampled clients off the upstream's data after the quiet period: ${r.sampleMismatches.length} (after ${r.quietRounds} rounds of polls)`,
    `  log lines: ${r.logLines} (${r.warnLines} at warn); at error or above, or with a credential: ${r.logProblems.length}`,
    ...Object.entries(r.warnMessages).map(([msg, n]) => `    warn ×${n}: ${msg.slice(0, 160)}`),
  ];
  return lines.join('\n');
}
