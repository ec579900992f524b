import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { readUpTo } from '../http/body.js';
import { endSocketWithShimError, NoRecordedAnswerError, sendShimError } from '../http/errors.js';
import { isLongPoll } from '../http/api-routes.js';
import type { Logger } from '../observability/logger.js';
import { loadHar, type Recorded } from './load.js';
import { matchOf } from './match.js';
import { allowLongPolls, listen } from '../http/listen.js';

/**
 * Replay mode (H2): a HAR file served as the upstream on loopback. The shim talks to it as to
 * any upstream. Requests are matched by method, path, sorted query and normalised body
 * (match.ts); identical requests get the recorded answers in recorded order, the last one
 * repeating (a client polls more often than during the recording). A request with no recorded
 * answer gets 502 REPLAY_MISS naming it, and is remembered for strict mode.
 */

/** Largest request body read to match a recorded one; a larger one is a miss. */
const REPLAY_BODY_MAX_BYTES = 64 * 1024 * 1024;

interface ReplayOptions {
  file: string;
  /** Strict mode: the caller fails the process at shutdown when misses() is not empty. */
  strict: boolean;
  log: Logger;
  /** Told of each miss as it happens (the embedding API's testing helper reports it to the test). */
  onMiss?: (what: string) => void;
}

export interface Replay {
  url: string;
  /** Recorded exchanges that can answer. */
  entries: number;
  /** One line per request that found no recorded answer, in order. */
  misses(): string[];
  close(): Promise<void>;
}

/**
 * A long poll (GET …/events) answered again from its last recording waits as long as the
 * recorded one did (capped at Zulip's own ~90 s), so a replayed client does not spin on it.
 */
const LONG_POLL_CAP_MS = 90_000;
/** Misses listed one by one; beyond this many a runaway client only adds to a count. */
const LISTED_MISSES = 1000;

interface Queue {
  entries: Recorded[];
  next: number;
}

const BODILESS = (method: string, status: number) => method === 'HEAD' || status === 204 || status === 304 || status < 200;

/** The request body, or undefined past `limit` (the rest is left unread). */
async function readBody(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  const read = await readUpTo(req, limit);
  return read.whole ? read.body : undefined;
}

function send(res: ServerResponse, method: string, r: Recorded): void {
  for (const [name, values] of groupHeaders(r.headers)) {
    try {
      res.setHeader(name, values.length === 1 ? values[0]! : values);
    } catch {
      // a header Node will not send (invalid characters in an export): left out
    }
  }
  const bodiless = BODILESS(method, r.status);
  if (!bodiless) res.setHeader('content-length', r.body.length);
  try {
    res.writeHead(r.status, r.statusText || undefined);
  } catch {
    res.writeHead(r.status);
  }
  res.end(bodiless ? undefined : r.body);
}

function groupHeaders(headers: Array<[string, string]>): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const [k, v] of headers) {
    const name = k.toLowerCase();
    const list = out.get(name) ?? [];
    list.push(v);
    out.set(name, list);
  }
  return out;
}

/** The recorded answers by what they match, each list in the file's order. */
function queuesOf(entries: readonly Recorded[]): Map<string, Queue> {
  const queues = new Map<string, Queue>();
  for (const r of entries) {
    const q = queues.get(r.match.key) ?? { entries: [], next: 0 };
    q.entries.push(r);
    queues.set(r.match.key, q);
  }
  return queues;
}

/** A repeated long poll's answer, sent after `wait` ms as recorded (cancelled when the client goes, or at close: `timers`). */
function answerLater(res: ServerResponse, method: string, r: Recorded, wait: number, timers: Set<NodeJS.Timeout>): void {
  const t = setTimeout(() => {
    timers.delete(t);
    if (!res.destroyed) send(res, method, r);
  }, wait);
  timers.add(t);
  res.on('close', () => {
    clearTimeout(t);
    timers.delete(t);
  });
}

export async function startReplay(o: ReplayOptions): Promise<Replay> {
  const loaded = await loadHar(o.file);
  const queues = queuesOf(loaded.entries);
  const misses: string[] = [];
  let unlisted = 0;
  const timers = new Set<NodeJS.Timeout>();

  const miss = (res: ServerResponse | undefined, what: string) => {
    if (misses.length < LISTED_MISSES) misses.push(what);
    else unlisted++;
    o.log.warn({ request: what }, 'replay miss: no recorded answer');
    o.onMiss?.(what);
    if (res) sendShimError(res, new NoRecordedAnswerError(what));
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const method = req.method ?? 'GET';
    const body = await readBody(req, REPLAY_BODY_MAX_BYTES);
    const url = req.url ?? '/';
    const match = await matchOf({ method, url, contentType: req.headers['content-type'], body: body ?? Buffer.alloc(0) });
    const q = body ? queues.get(match.key) : undefined;
    if (!q) return miss(res, body ? match.describe : `${match.describe} (body over ${REPLAY_BODY_MAX_BYTES} bytes)`);
    const repeat = q.next >= q.entries.length;
    const r = q.entries[Math.min(q.next, q.entries.length - 1)]!;
    q.next++;
    o.log.debug({ entry: r.index, repeat }, 'replayed');
    const wait = repeat && isLongPoll(method, url) ? Math.min(r.time, LONG_POLL_CAP_MS) : 0;
    if (wait < 1) return send(res, method, r);
    answerLater(res, method, r, wait, timers);
  };

  const server = http.createServer((req, res) => {
    handle(req, res).catch((e: unknown) => {
      o.log.error({ err: e }, 'replay failed to answer');
      if (!res.headersSent) miss(res, `${req.method} ${new URL(req.url ?? '/', 'http://x').pathname} (unreadable request)`);
      else res.destroy();
    });
  });
  server.on('upgrade', (req: IncomingMessage, socket: Duplex) => {
    const what = `${req.method} ${new URL(req.url ?? '/', 'http://x').pathname} (WebSocket upgrade)`;
    miss(undefined, what);
    socket.on('error', () => socket.destroy());
    endSocketWithShimError(socket, new NoRecordedAnswerError(what));
  });
  // Like the shim, never cut a long poll.
  allowLongPolls(server);
  const { url } = await listen(server, 0, '127.0.0.1');
  o.log.info(
    { file: o.file, entries: loaded.entries.length, skipped: loaded.skipped, strict: o.strict },
    'replaying a HAR file as the upstream',
  );

  let closing: Promise<void> | undefined;
  return {
    url,
    entries: loaded.entries.length,
    misses: () => (unlisted ? [...misses, `… and ${unlisted} more`] : [...misses]),
    close() {
      closing ??= new Promise<void>((resolve) => {
        for (const t of timers) clearTimeout(t);
        timers.clear();
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}
