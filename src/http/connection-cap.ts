import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { endSocketWithShimError, ShimError } from './errors.js';

/**
 * X11: client connections are capped below the descriptors the process may open (as nginx's
 * `worker_connections`), so that held long polls and idle connections never leave the shim's
 * own paths, its upstream calls and its store without descriptors. A connection past the cap
 * is answered at once with a Zulip-shaped 503 and `Retry-After`, then closed.
 */

/** Past the cap: come back in a moment. */
/** Seconds a refused client is asked to wait. */
const RETRY_AFTER_SECONDS = 5;

export class TooManyConnectionsError extends ShimError {
  constructor() {
    super(503, 'UPSTREAM_UNAVAILABLE', 'zulip-compat-shim has too many connections open; try again', RETRY_AFTER_SECONDS);
  }
}

/**
 * Descriptors kept out of the cap besides two upstream pools' worth: listening sockets, the
 * store, log output, files, the worker threads, and a margin for descriptors in closing.
 */
const RESERVED_DESCRIPTORS = 512;

/** The process's soft limit on open descriptors (Linux: /proc/self/limits), or undefined when unknown or unlimited. */
export function descriptorLimit(limits = '/proc/self/limits'): number | undefined {
  try {
    const line = readFileSync(limits, 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    const soft = line?.slice('Max open files'.length).trim().split(/\s+/)[0];
    const n = Number(soft);
    return Number.isSafeInteger(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The cap for `auto`: each passed-through connection may hold two descriptors (the client's and
 * its upstream request's, a long poll's own), after the shim's own pool and the reserve.
 * Unknown limit: no cap beyond the operating system's.
 */
export function autoConnectionCap(limit: number | undefined, maxSockets: number): number {
  if (limit === undefined) return Number.POSITIVE_INFINITY;
  return Math.max(1, Math.floor((limit - RESERVED_DESCRIPTORS - maxSockets) / 2));
}

export interface ConnectionCap {
  readonly max: number;
  /** Client connections open now. */
  open(): number;
  /**
   * Is this connection past the cap? Its request gets a 503 with `Retry-After`, but for the
   * shim's own paths (/healthz, /readyz, /metrics), which are answered: a probe still tells a
   * busy shim from a dead one. Either way the connection then closes.
   */
  overCap(socket: Socket | Duplex): boolean;
}

export interface ConnectionEvents {
  /** The number of open connections changed. */
  counted(open: number): void;
  /** A connection past the cap was refused. */
  refused(): void;
}

/** How long a connection past the cap has to send its request (its descriptor is borrowed from the reserve). */
const OVER_CAP_REQUEST_MS = 5_000;

/**
 * Counts the server's client connections. One past `max` is served a single request (see
 * `overCap`) within OVER_CAP_REQUEST_MS and then closed; past `max` plus half the reserve it
 * is closed at once, so the reserve itself is never used up.
 */
export function capConnections(server: Server, max: number, events: ConnectionEvents): ConnectionCap {
  let open = 0;
  const over = new WeakSet<object>();
  const hardMax = max + RESERVED_DESCRIPTORS / 2;
  server.on('connection', (socket: Socket) => {
    events.counted(++open);
    socket.once('close', () => events.counted(--open));
    if (open <= max) return;
    events.refused();
    socket.on('error', () => socket.destroy());
    if (open > hardMax) {
      socket.destroy();
      return;
    }
    over.add(socket);
    socket.setTimeout(OVER_CAP_REQUEST_MS, () => socket.destroy());
  });
  return { max, open: () => open, overCap: (socket) => over.has(socket) };
}

/** The answer to a request on a connection past the cap (`overCap`), on its socket. */
export function refuseOverCap(socket: Duplex): void {
  endSocketWithShimError(socket, new TooManyConnectionsError());
}

/** The headers of the 503 for a request past the cap, answered through its response. */
export const OVER_CAP_HEADERS = { connection: 'close' } as const;
