import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { endSocketWithShimError, ShimError } from './errors.js';

/**
 * X11: client connections are capped below the descriptors the process may open (as nginx's
 * `worker_connections`), so that held long polls and idle connections never leave the shim's
 * own paths, its upstream calls and its store without descriptors.
 *
 * Two caps, one inside the other. `max` client connections may be open; at most
 * `passThroughMax` (half of them) may carry a request the shim only passes on (a long poll, an
 * upload, a WebSocket), which holds an upstream connection as well. The other half is headroom
 * for the endpoints the shim answers itself (presence, /users/me, register, server_settings,
 * users) and its own paths: their upstream calls go through the shim's own pool, counted apart,
 * so they need no descriptor beyond their connection. Past `passThroughMax`, a passed-through
 * request gets a Zulip-shaped 503 with `Retry-After` while the others are still answered.
 *
 * At `max`, the connection idle longest (no request in flight, for a second at least) is closed
 * for a new one, as nginx closes idle keep-alive connections when it runs out; a connection
 * accepted near the cap must send its first request within FIRST_REQUEST_MS. When no
 * connection has been idle that long, a new one is taken from the reserve (OVER_CAP_BAND): it
 * gets one answer, then closes; with that band full too, the one idle longest goes at any age,
 * and with none idle at all the new one is closed at once.
 */

/** Seconds a refused client is asked to wait. */
const RETRY_AFTER_SECONDS = 5;

export class TooManyConnectionsError extends ShimError {
  constructor() {
    super(503, 'UPSTREAM_UNAVAILABLE', 'zulip-compat-shim has too many connections open; try again', RETRY_AFTER_SECONDS);
  }
}

/** Past `passThroughMax`: what the shim only passes on waits; what it answers itself does not. */
export class TooManyPassedThroughError extends ShimError {
  constructor() {
    super(503, 'UPSTREAM_UNAVAILABLE', 'zulip-compat-shim is passing on as many requests as it can hold; try again', RETRY_AFTER_SECONDS);
  }
}

/**
 * Descriptors kept out of the cap besides the upstream pools: listening sockets, the store,
 * log output, files, the worker threads, and a margin for descriptors in closing. Half of it
 * is the band a connection past the cap borrows (OVER_CAP_BAND).
 */
const RESERVED_DESCRIPTORS = 512;

/** Connections taken past `max` when none is idle, each for one answer; beyond it they are closed at once. */
const OVER_CAP_BAND = RESERVED_DESCRIPTORS / 2;

/**
 * At the cap, a connection is closed for a new one only once it has been idle this long: one just
 * accepted (its request not yet read) or between two requests of a busy client is not. When
 * every idle connection is younger, the new one is taken from the reserve instead, and only
 * when that band is full too does the one idle longest go at any age.
 */
export const CLOSABLE_AFTER_IDLE_MS = 1_000;

/** A connection accepted near the cap (NEAR_CAP of `max`) sends its first request's head within this long, or is closed. */
export const FIRST_REQUEST_MS = 5_000;
const NEAR_CAP = 0.75;

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

/** Upstream pools of `maxSockets` connections each: the shim's own calls, the pass-through's, and uploads'. */
const CAPPED_POOLS = 3;

/**
 * `max` for `auto`: the descriptors left after the reserve and the capped upstream pools (whose
 * kept-alive connections may all be open at once) hold the client connections and the upstream
 * requests of those passed through: `max` + `max` / 2 of them, so two thirds are client
 * connections. That is one passed-through request (a long poll) and one other connection per
 * client at the cap, as Zulip's apps hold. Unknown limit: no cap beyond the operating system's.
 */
export function autoConnectionCap(limit: number | undefined, maxSockets: number): number {
  if (limit === undefined) return Number.POSITIVE_INFINITY;
  return Math.max(2, Math.floor(((limit - RESERVED_DESCRIPTORS - CAPPED_POOLS * maxSockets) * 2) / 3));
}

/** The passed-through requests a cap of `max` connections carries at once: half of them. */
export const passThroughCap = (max: number): number => Math.max(1, Math.floor(max / 2));

export interface ConnectionEvents {
  /** The number of open connections changed. */
  counted(open: number): void;
  /** A connection came past the cap with none idle to close for it (taken from the reserve, or closed at once). */
  refused(): void;
  /** An idle connection was closed to make room (at the cap, or silent past FIRST_REQUEST_MS near it). */
  closedIdle(): void;
  /** A passed-through request came past `passThroughMax`. */
  passThroughRefused(): void;
}

/** One client connection, linked into the list of idle ones (oldest first) while it has no request in flight. */
class ClientConnection {
  prev: ClientConnection | undefined;
  next: ClientConnection | undefined;
  idle = false;
  /** When it last became idle (performance.now()). */
  idleSince = 0;
  /** Counted in `open` (no longer once closed to make room: its close event comes later). */
  counted = true;
  /** Requests in flight on it (more than one only when a client pipelines). */
  requests = 0;
  /** Taken from the reserve past the cap: one answer, then it closes. */
  over = false;
  /** Near the cap: closed unless its first request comes in time. */
  deadline: NodeJS.Timeout | undefined;

  constructor(readonly socket: Socket) {}
}

const CONNECTION = Symbol('zulip-compat-shim connection');
type Tracked = (Socket | Duplex) & { [CONNECTION]?: ClientConnection };

export class ConnectionCap {
  readonly passThroughMax: number;
  private open = 0;
  private passing = 0;
  private oldestIdle: ClientConnection | undefined;
  private newestIdle: ClientConnection | undefined;

  constructor(
    readonly max: number,
    private readonly events: ConnectionEvents,
  ) {
    this.passThroughMax = passThroughCap(max);
  }

  /** Counts the server's client connections from now on. */
  watch(server: Server): this {
    server.on('connection', (socket: Socket) => this.accepted(socket));
    return this;
  }

  /** Client connections open now. */
  openConnections(): number {
    return this.open;
  }

  /** Passed-through requests (and WebSocket tunnels) in flight now. */
  passingThrough(): number {
    return this.passing;
  }

  /**
   * Is this connection past the cap (taken from the reserve)? Its one request is answered when
   * the shim answers it itself (an intercepted endpoint, its own paths), else refused; either
   * way the connection then closes.
   */
  overCap(socket: Socket | Duplex): boolean {
    return (socket as Tracked)[CONNECTION]?.over === true;
  }

  /** A request began on this connection: it is not idle until its answer closes. */
  requestStarted(socket: Socket | Duplex): void {
    const c = (socket as Tracked)[CONNECTION];
    if (!c) return; // a request handed over by another server (`handle`)
    c.requests++;
    if (c.deadline) {
      clearTimeout(c.deadline);
      c.deadline = undefined;
    }
    this.unlinkIdle(c);
  }

  /** A request's answer closed: with none left in flight, the connection is idle (the newest). */
  answerClosed(socket: Socket | Duplex): void {
    const c = (socket as Tracked)[CONNECTION];
    if (!c || --c.requests > 0 || c.socket.destroyed) return;
    this.linkIdle(c);
  }

  /** X11: may one more request be passed through? Past `passThroughMax`, no: the caller answers it with TooManyPassedThroughError. */
  takePassThrough(): boolean {
    if (this.passing >= this.passThroughMax) {
      this.events.passThroughRefused();
      return false;
    }
    this.passing++;
    return true;
  }

  /** A passed-through request taken by `takePassThrough` ended. */
  passThroughEnded(): void {
    this.passing--;
  }

  private accepted(socket: Socket): void {
    const c = new ClientConnection(socket);
    (socket as Tracked)[CONNECTION] = c;
    socket.once('close', () => this.closed(c));
    // At the cap, the connection idle longest goes: once idle a while, or at any age when the
    // reserve's band is full too (a flood of connections that send nothing).
    if (this.open >= this.max) this.closeOldestIdle(this.open >= this.max + OVER_CAP_BAND);
    this.events.counted(++this.open);
    if (this.open > this.max) {
      this.events.refused();
      socket.on('error', () => socket.destroy());
      if (this.open > this.max + OVER_CAP_BAND) {
        socket.destroy();
        return;
      }
      c.over = true;
    }
    if (this.open >= this.max * NEAR_CAP) {
      c.deadline = setTimeout(() => this.silentTooLong(c), FIRST_REQUEST_MS);
      c.deadline.unref();
    }
    this.linkIdle(c);
  }

  private closed(c: ClientConnection): void {
    clearTimeout(c.deadline);
    this.unlinkIdle(c);
    if (c.counted) this.events.counted(--this.open);
  }

  private silentTooLong(c: ClientConnection): void {
    c.deadline = undefined;
    if (c.requests > 0 || !c.idle) return;
    this.events.closedIdle();
    c.socket.destroy();
  }

  /** At the cap: the connection idle longest goes (idle long enough, or `anyAge`), so a new one is served. */
  private closeOldestIdle(anyAge: boolean): void {
    const oldest = this.oldestIdle;
    if (!oldest || (!anyAge && performance.now() - oldest.idleSince < CLOSABLE_AFTER_IDLE_MS)) return;
    this.unlinkIdle(oldest);
    // Its descriptor is free now; its close event comes later.
    oldest.counted = false;
    this.open--;
    this.events.closedIdle();
    // Destroyed, not ended: an idle client that never reads would keep an ended socket's descriptor.
    oldest.socket.destroy();
  }

  private linkIdle(c: ClientConnection): void {
    if (c.idle) return;
    c.idle = true;
    c.idleSince = performance.now();
    c.prev = this.newestIdle;
    c.next = undefined;
    if (this.newestIdle) this.newestIdle.next = c;
    else this.oldestIdle = c;
    this.newestIdle = c;
  }

  private unlinkIdle(c: ClientConnection): void {
    if (!c.idle) return;
    c.idle = false;
    if (c.prev) c.prev.next = c.next;
    else this.oldestIdle = c.next;
    if (c.next) c.next.prev = c.prev;
    else this.newestIdle = c.prev;
    c.prev = c.next = undefined;
  }
}

/** The answer to a request on a connection past the cap (`overCap`), on its socket. */
export function refuseOverCap(socket: Duplex): void {
  endSocketWithShimError(socket, new TooManyConnectionsError());
}

/** The headers of a 503 for a request past the cap, answered through its response. */
export const OVER_CAP_HEADERS = { connection: 'close' } as const;
