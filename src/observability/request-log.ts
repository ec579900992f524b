import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { recordedFacts, type RequestFacts } from './request-facts.js';
import { destinationOf, loggablePath, type Logger } from './logger.js';
import type { Metrics } from './metrics.js';
import type { RouteLabel } from '../http/api-routes.js';
import { METHOD_LABELS, statusLabel } from './route-label.js';
import { LabelChildren } from './label-children.js';
import { clientAddressOf, type TrustedProxies } from '../http/forwarded.js';

const REQUEST_ID = /^[\w.:-]{1,128}$/;

/** pino's numeric levels of the two lines written here. */
const INFO = 30;
const WARN = 40;

/**
 * Per connection: its bytes read and written when its last answer ended (kept beside the
 * socket, not on it: Node's socket objects keep the shape Node gives them).
 */
const countedOf = new WeakMap<Socket, { read: number; written: number }>();

/** A user agent is cut to this many characters in the line (a client controls it). */
const USER_AGENT_CHARS = 200;

/**
 * The ISO time of the current millisecond, made at most once per millisecond. The wall clock,
 * not the performance clock the record is timed by: a log line's time follows the machine's
 * clock when it is stepped, as pino's other lines and the logs beside the shim's do.
 */
let isoAt = 0;
let iso = '';
function isoNow(): string {
  const now = Date.now();
  if (now !== isoAt) {
    isoAt = now;
    iso = new Date(now).toISOString();
  }
  return iso;
}

/** What the request log knows of a request as it starts: its id and its metrics route label. */
export interface LoggedRequest {
  /** X-Request-Id: a trusted proxy's when sane, else a fresh UUID; sent upstream and on the answer. */
  requestId: string;
  route: RouteLabel;
  /** The answer closed (finished or cut): writes the line and the metrics. Called once, by the server's one `close` listener. */
  closed(): void;
}

/**
 * One log line per request, when its answer is done: method, path without query values (they
 * can hold secrets, P13), status, time, the client's address, user agent and bytes in and out,
 * upstream time and what the shim did (RequestFacts);
 * and the client-facing request metrics: a counter and a latency histogram by route
 * class, method and status class. The request id is the `X-Request-Id` a trusted proxy (X4)
 * sent when it is sane, else a fresh UUID (as Envoy: a client's own is not believed); it is
 * passed upstream and back. Behind a trusted proxy the line's `remote` is the client it names,
 * `peer` the proxy.
 *
 * Written on every proxied request, so built for the hot path (bench/RESULTS.md, B4): the line
 * is one JSON string in pino's own format written straight to the logger's destination (no
 * serialisers, no redaction pass: it carries no header and no query value), the time string
 * is made once per millisecond, and metric label children are looked up once.
 */
export function requestLogger(
  log: Logger,
  metrics?: Pick<Metrics, 'requestCounts' | 'requestDuration'>,
  /**
   * Whether to write the line (`log.access`), at any log level but `silent` (nginx's access_log
   * beside its error_log); metrics are counted either way. Read per request (SIGHUP).
   */
  access: () => boolean = () => true,
  /**
   * The peers believed (X4, `server.trustProxy`): behind one, the line's client is the nearest
   * untrusted address of X-Forwarded-For (nginx `real_ip_recursive`), the peer beside it, and
   * the request's X-Request-Id is kept; anyone else's id is replaced. Read per request (SIGHUP).
   */
  trusted?: () => TrustedProxies,
) {
  const dest = destinationOf(log);
  const name = JSON.stringify((log.bindings() as { name?: string }).name ?? 'zulip-compat-shim');
  const count = metrics ? (route: string, method: string, status: string) => metrics.requestCounts.of(route, method, status) : undefined;
  const durations = metrics ? new LabelChildren((route, method) => metrics.requestDuration.labels(route, method)) : undefined;

  /**
   * Starts a request's record and returns its id and route label. The id is put on the request
   * (it goes upstream); the caller puts it on the answer, and calls `closed()` when the answer
   * closes. `quiet`: the shim's own paths get an id but no line and no metrics.
   */
  return (req: IncomingMessage, res: ServerResponse, route: RouteLabel, quiet = false): LoggedRequest => {
    const peer = req.socket?.remoteAddress ?? '';
    const proxies = trusted?.();
    const viaProxy = proxies?.trusts(peer) === true;
    const given = req.headers['x-request-id'];
    const id = viaProxy && typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    req.headers['x-request-id'] = id;
    const client = viaProxy ? clientAddressOf(req, proxies!) : peer;
    return new Logged(id, route, req, res, client, peer, quiet ? undefined : written);
  };

  /** The answer closed: the metrics, and the line unless access lines are off. */
  function written(r: Logged, elapsed: number): void {
    const bytes = bytesSincePrevious(r.socket);
    const aborted = !r.res.writableFinished;
    if (count && durations) {
      const method = METHOD_LABELS.has(r.req.method ?? '') ? r.req.method! : 'other';
      count(r.route, method, aborted ? 'aborted' : statusLabel(r.res.statusCode)).n++;
      if (!aborted) durations.get(r.route, method).observe(elapsed / 1000);
    }
    // pino's `silent` is Infinity: nothing at all is written.
    if (!access() || log.levelVal === Number.POSITIVE_INFINITY) return;
    const line = accessLine(name, r, elapsed, bytes, aborted);
    if (dest) dest.write(line);
    else viaLogger(log, line);
  }
}

/**
 * An access line through a logger the shim did not make (an embedding application's pino, whose
 * destination is its own): its fields given to the logger, which adds its own level, time and
 * bindings and writes it where and whether its level says.
 */
function viaLogger(log: Logger, line: string): void {
  const { level, time: _time, name: _name, msg, ...fields } = JSON.parse(line) as Record<string, unknown>;
  if (level === WARN) log.warn(fields, String(msg));
  else log.info(fields, String(msg));
}

/**
 * Bytes on the connection since the previous answer on it ended: one request at a time on a
 * connection, so that is this one's (head and body).
 */
function bytesSincePrevious(socket: Socket | null): { bytesIn: number; bytesOut: number } {
  if (!socket) return { bytesIn: 0, bytesOut: 0 };
  const read = socket.bytesRead;
  const sent = socket.bytesWritten;
  const before = countedOf.get(socket);
  if (!before) {
    countedOf.set(socket, { read, written: sent });
    return { bytesIn: read, bytesOut: sent };
  }
  const counted = { bytesIn: read - before.read, bytesOut: sent - before.written };
  before.read = read;
  before.written = sent;
  return counted;
}

/** The access line, in pino's own format (`name`: the logger's, as JSON). */
function accessLine(name: string, r: Logged, elapsed: number, bytes: { bytesIn: number; bytesOut: number }, aborted: boolean): string {
  const { req } = r;
  const status = r.res.statusCode;
  const level = aborted || status >= 500 ? WARN : INFO;
  let line = `{"level":${level},"time":"${isoNow()}","name":${name},"reqId":"${r.requestId}","req":{"method":${JSON.stringify(req.method)},"path":${JSON.stringify(loggablePath(req.url))}},"res":{"status":${status}},"responseTime":${Math.round(elapsed)}`;
  line += `,"remote":${JSON.stringify(r.client)}`;
  if (r.client !== r.peer) line += `,"peer":${JSON.stringify(r.peer)}`;
  line += `,"bytesIn":${bytes.bytesIn},"bytesOut":${bytes.bytesOut}`;
  const agent = req.headers['user-agent'];
  if (agent) line += `,"userAgent":${JSON.stringify(agent.length > USER_AGENT_CHARS ? agent.slice(0, USER_AGENT_CHARS) : agent)}`;
  if (aborted) line += ',"aborted":true';
  line += factFields(recordedFacts(req));
  return `${line},"msg":"${aborted ? 'request aborted' : 'request completed'}"}\n`;
}

/** What the shim did, as the line's last fields: those the request recorded. */
function factFields(f: RequestFacts): string {
  let fields = '';
  if (f.upstreamMs !== undefined) fields += `,"upstreamMs":${f.upstreamMs}`;
  if (f.realm !== undefined) fields += `,"realm":${JSON.stringify(f.realm)}`;
  if (f.featureLevel !== undefined) fields += `,"featureLevel":${f.featureLevel}`;
  if (f.kind !== undefined) fields += `,"kind":${JSON.stringify(f.kind)}`;
  return fields;
}

/** One request's record, from its start to its answer's close: one object a request, no closures. */
class Logged implements LoggedRequest {
  private readonly started = performance.now();
  /** The connection as the request came (an answer's close may find it detached). */
  readonly socket: Socket | null;

  constructor(
    readonly requestId: string,
    readonly route: RouteLabel,
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    /** The client's address: the peer's, or behind a trusted proxy the one X-Forwarded-For names. */
    readonly client: string,
    /** The connection's peer address. */
    readonly peer: string,
    private readonly done: ((r: Logged, elapsed: number) => void) | undefined,
  ) {
    this.socket = req.socket as Socket | null;
  }

  closed(): void {
    this.done?.(this, performance.now() - this.started);
  }
}
