import { createRequire } from 'node:module';
import { gunzipSync } from 'node:zlib';
import { Pool } from 'undici';

/**
 * Load drivers: a closed loop with exact latencies (undici; autocannon records whole
 * milliseconds, too coarse for a 1 ms presence answer), paced simulated clients (B2), and
 * autocannon for request rates (B4).
 */

export interface Req {
  method: 'GET' | 'POST';
  path: string;
  headers: Record<string, string>;
  body?: string;
}

export interface Sample {
  status: number;
  /** Body bytes as sent (compressed when the answer was). */
  bytes: number;
  /** Body bytes once decoded (the JSON), when `decode` was asked; else equal to `bytes`. */
  rawBytes: number;
  ms: number;
  /** The last bytes of the body (where presence_last_update_id is). */
  tail: string;
  /** Content-Encoding of the answer, if any. */
  encoding: string | undefined;
  body?: Buffer;
}

/**
 * Sends one request and reads the answer to its last byte. With `decode`, a gzipped answer is
 * also decompressed (for its size and presence_last_update_id); `keepBody` keeps the bytes sent.
 */
export async function send(pool: Pool, r: Req, keepBody = false, decode = false): Promise<Sample> {
  const t0 = performance.now();
  const res = await pool.request({ method: r.method, path: r.path, headers: r.headers, body: r.body });
  let bytes = 0;
  const chunks: Buffer[] = [];
  let last: Buffer = Buffer.alloc(0);
  let prev: Buffer = Buffer.alloc(0);
  const h = res.headers['content-encoding'];
  const encoding = Array.isArray(h) ? h.join(',') : h;
  const gzipped = decode && encoding === 'gzip';
  for await (const c of res.body) {
    const chunk = c as Buffer;
    bytes += chunk.length;
    if (keepBody || gzipped) chunks.push(chunk);
    prev = last;
    last = chunk;
  }
  const ms = performance.now() - t0;
  let rawBytes = bytes;
  let tail = Buffer.concat([prev, last]).subarray(-256).toString('latin1');
  if (gzipped) {
    const raw = gunzipSync(Buffer.concat(chunks));
    rawBytes = raw.length;
    tail = raw.subarray(-256).toString('latin1');
  }
  return { status: res.statusCode, bytes, rawBytes, ms, tail, encoding, ...(keepBody ? { body: Buffer.concat(chunks) } : {}) };
}

/** presence_last_update_id from the end of an answer, or undefined. */
export function lastUpdateIdOf(tail: string): number | undefined {
  const m = /"presence_last_update_id":(-?\d+)/.exec(tail);
  return m ? Number(m[1]) : undefined;
}

export interface LatencySummary {
  count: number;
  errors: number;
  non2xx: number;
  rps: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
  meanBytes: number;
}

/** The median of some numbers (the middle one of an odd count): a verdict over alternated rounds. */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export function summarise(ms: number[], bytes: number, errors: number, non2xx: number, elapsedMs: number): LatencySummary {
  const sorted = Float64Array.from(ms).sort();
  const sum = ms.reduce((a, b) => a + b, 0);
  return {
    count: ms.length,
    errors,
    non2xx,
    rps: (ms.length / elapsedMs) * 1000,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: sorted.length ? sorted[sorted.length - 1]! : NaN,
    mean: ms.length ? sum / ms.length : NaN,
    meanBytes: ms.length ? bytes / ms.length : NaN,
  };
}

/**
 * `connections` workers, each sending its next request as soon as the previous one is read,
 * for `durationMs`. `next(worker, n)` gives the n-th request of a worker.
 */
export async function closedLoop(
  url: string,
  connections: number,
  durationMs: number,
  next: (worker: number, n: number) => Req,
  maxRequests = 10_000_000,
): Promise<LatencySummary> {
  const pool = new Pool(url, { connections, pipelining: 1, keepAliveTimeout: 60_000 });
  const ms: number[] = [];
  let bytes = 0;
  let errors = 0;
  let non2xx = 0;
  const t0 = performance.now();
  const end = t0 + durationMs;
  let started = 0;
  const worker = async (w: number) => {
    for (let n = 0; performance.now() < end && started < maxRequests; n++) {
      started++;
      try {
        const s = await send(pool, next(w, n));
        if (s.status >= 200 && s.status < 300) {
          ms.push(s.ms);
          bytes += s.bytes;
        } else non2xx++;
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: connections }, (_, w) => worker(w)));
  const elapsed = performance.now() - t0;
  await pool.close();
  return summarise(ms, bytes, errors, non2xx, elapsed);
}

export interface PacedPoll {
  client: number;
  minute: number;
  status: number;
  /** Body bytes as sent (gzipped when the shim compressed the answer). */
  bytes: number;
  /** Body bytes decoded (the JSON a client without gzip gets). */
  rawBytes: number;
  /** Content-Encoding of the answer. */
  encoding: string | undefined;
  ms: number;
  /** The last_update_id the poll sent. */
  sent: number;
  body?: Buffer;
}

export interface PacedOptions {
  url: string;
  clients: number;
  minuteMs: number;
  minutes: number;
  /** Pool connections to the shim. */
  connections: number;
  request(client: number, lastUpdateId: number): Req;
  /** Keep the body of this poll (for the gzip figures)? */
  keepBody(client: number, minute: number): boolean;
  /** The last_update_id each client starts from (default -1: a full first poll). */
  initialId?: number;
  /** Stop sending new polls after this many ms (default: the whole schedule). */
  limitMs?: number;
  /** Called at the start of each simulated minute (after the first). */
  onMinute?(minute: number): void | Promise<void>;
}

/**
 * B2: `clients` simulated clients, each polling once per simulated minute at its own offset
 * (spread evenly over the minute), continuing from the presence_last_update_id of its
 * previous answer, as a real client polling every 60 s does.
 */
export async function pacedClients(o: PacedOptions): Promise<PacedPoll[]> {
  const pool = new Pool(o.url, { connections: o.connections, pipelining: 1, keepAliveTimeout: 60_000 });
  const lastId = new Array<number>(o.clients).fill(o.initialId ?? -1);
  const busy = new Uint8Array(o.clients);
  const polls: PacedPoll[] = [];
  const inflight = new Set<Promise<void>>();
  const t0 = performance.now();
  const total = o.clients * o.minutes;
  let fired = 0;
  let minuteSeen = 0;

  const fire = (client: number, minute: number) => {
    if (busy[client]) return; // still waiting for its previous answer: a real client would not send another
    busy[client] = 1;
    const sent = lastId[client]!;
    const keep = o.keepBody(client, minute);
    const p: Promise<void> = send(pool, o.request(client, sent), keep, true)
      .then((s) => {
        const id = lastUpdateIdOf(s.tail);
        if (id !== undefined) lastId[client] = id;
        polls.push({
          client,
          minute,
          status: s.status,
          bytes: s.bytes,
          rawBytes: s.rawBytes,
          encoding: s.encoding,
          ms: s.ms,
          sent,
          ...(s.body ? { body: s.body } : {}),
        });
      })
      .catch(() => {
        polls.push({ client, minute, status: 0, bytes: 0, rawBytes: 0, encoding: undefined, ms: 0, sent });
      })
      .finally(() => {
        busy[client] = 0;
        inflight.delete(p);
      });
    inflight.add(p);
  };

  while (fired < total) {
    const elapsed = performance.now() - t0;
    if (o.limitMs !== undefined && elapsed >= o.limitMs) break;
    // Every poll whose time has come: poll k is client k % clients in minute k / clients.
    const due = Math.min(total, Math.floor((elapsed / o.minuteMs) * o.clients) + 1);
    while (fired < due) {
      const minute = Math.floor(fired / o.clients);
      if (minute > minuteSeen) {
        minuteSeen = minute;
        await o.onMinute?.(minute);
      }
      fire(fired % o.clients, minute);
      fired++;
    }
    await new Promise((r) => setTimeout(r, 2));
  }
  await Promise.all(inflight);
  await pool.close();
  return polls;
}

export interface CannonResult {
  rps: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  requests: number;
}

interface AutocannonOut {
  requests: { average: number; total: number };
  latency: { p50: number; p99: number };
  non2xx: number;
  errors: number;
  timeouts: number;
}
type Autocannon = (o: Record<string, unknown>) => Promise<AutocannonOut>;
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon;

/** B4: request rate and latency (whole ms) with autocannon, GET with fixed headers. */
export async function cannon(url: string, connections: number, durationS: number, headers: Record<string, string>): Promise<CannonResult> {
  const r = await autocannon({ url, connections, duration: durationS, headers, pipelining: 1 });
  return {
    rps: r.requests.total / durationS,
    p50: r.latency.p50,
    p99: r.latency.p99,
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    requests: r.requests.total,
  };
}

/** Garbage collection so far, by kind (minor, major, incremental, weakcb), and in all. */
export interface GcSoFar {
  seconds: number;
  byKind: Record<string, { count: number; seconds: number }>;
}

const GC_SERIES = /^nodejs_gc_duration_seconds_(sum|count)\{kind="(\w+)"\} ([\d.e+-]+)$/gm;

/** What a shim's own `/metrics` says of its garbage collection so far. */
export async function gcOf(url: string): Promise<GcSoFar> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const byKind: GcSoFar['byKind'] = {};
  let seconds = 0;
  for (const [, series, kind, value] of text.matchAll(GC_SERIES)) {
    byKind[kind!] ??= { count: 0, seconds: 0 };
    const k = byKind[kind!]!;
    if (series === 'sum') {
      k.seconds += Number(value);
      seconds += Number(value);
    } else k.count += Number(value);
  }
  return { seconds, byKind };
}

/** What happened between two readings of gcOf. */
export function gcBetween(a: GcSoFar, b: GcSoFar): GcSoFar {
  const byKind: GcSoFar['byKind'] = {};
  for (const [kind, k] of Object.entries(b.byKind)) {
    const was = a.byKind[kind] ?? { count: 0, seconds: 0 };
    byKind[kind] = { count: k.count - was.count, seconds: k.seconds - was.seconds };
  }
  return { seconds: b.seconds - a.seconds, byKind };
}

const ANSWER_SERIES = /^zulip_compat_shim_presence_answers_total\{kind="(\w+)"\} ([\d.e+-]+)$/gm;

/** What a shim's own `/metrics` says of its presence answers so far, by kind (delta, resync, …). */
export async function answersOf(url: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const byKind: Record<string, number> = {};
  for (const [, kind, value] of text.matchAll(ANSWER_SERIES)) byKind[kind!] = (byKind[kind!] ?? 0) + Number(value);
  return byKind;
}
