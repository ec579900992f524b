import http, { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { parseListenAddress, type Config } from './config.js';
import type { EndpointHandler, ShimContext } from './context.js';
import {
  BadRequestError,
  badRequest,
  endSocketWithShimError,
  errorBody,
  sendJson,
  sendShimError,
  toShimError,
  ShimError,
} from './http/errors.js';
import { loggablePath, type Logger } from './observability/logger.js';
import { createMetrics } from './observability/metrics.js';
import { requestLogger } from './observability/request-log.js';
import { clientRequestCounter } from './observability/client-requests.js';
import { upstreamObserver } from './observability/upstream-metrics.js';
import { createPassThrough, type PassThrough, type PassThroughExchange } from './proxy/passthrough.js';
import { realmHostMatcher } from './realm-hosts.js';
import { encodePath, routeOf, type OwnPath, type Route } from './routes.js';
import { SnapshotHub, type ReplicaSnapshots } from './presence/snapshots.js';
import { replicaSnapshotsFor, createStore } from './store/create.js';
import type { PresenceStore } from './presence/ledger-store.js';
import { UpstreamClient } from './upstream/client.js';
import { createTransport } from './upstream/transport.js';
import { clientAddressOf, distrustForwarded, ReplacedProtoWarnings, TrustedProxies } from './http/forwarded.js';
import { declaresBody } from './http/headers.js';
import { PresenceState } from './presence/state.js';
import { appRequestHandler, isTranslatedAppRequest } from './app/handler.js';
import { RealmAdmission } from './upstream/realm-admission.js';
import { FeatureLevels } from './upstream/feature-level.js';
import { relayBuffered, UpstreamRefused } from './upstream/relay.js';
import { createPushRelay } from './push/relay.js';
import { realmOf } from './upstream/realm.js';
import { UserDirectory, USER_LIST_MIN_REFRESH_MS } from './upstream/user-directory.js';
import { Callers } from './upstream/callers.js';
import { PARSE_POOL, ParsePool } from './parse/parse-worker.js';
import { InFlightAnswers } from './http/in-flight.js';
import { allowLongPolls, listen } from './http/listen.js';
import { bodyToCome, watchBody, type BodyTimeout, type BodyWatch } from './http/body-deadline.js';
import { TooManyUploadsError, UploadSlots } from './http/upload-slots.js';
import { isWebSocketUpgrade, toOriginForm, withoutUpgradeOffer } from './http/request-target.js';
import {
  autoConnectionCap,
  ConnectionCap,
  descriptorLimit,
  OVER_CAP_HEADERS,
  refuseOverCap,
  TooManyConnectionsError,
  TooManyPassedThroughError,
} from './http/connection-cap.js';

/**
 * A request comes in; its route is decided once (routes.ts): one of the shim's own paths, an
 * intercepted handler, or the pass-through, which streams it to the upstream untouched.
 */

export interface ShimOptions {
  config: Config;
  log: Logger;
  /** Where upstream traffic goes (the upstream, or a recorder/replayer standing in for it). */
  target: string;
  /** The upstream's identity for realm keys. */
  upstreamId: string;
  /** Where realm state lives; by default the one config.store asks for (Redis or in-memory). */
  store?: PresenceStore;
  /** Cross-replica snapshot sharing; by default on the store's Redis, if it has one. */
  replicaSnapshots?: ReplicaSnapshots;
  /** Extra readiness checks (store reachable, …); each throws when not ready. */
  readinessChecks?: Array<() => Promise<void>>;
  /** X5: retry safe requests on a broken kept-alive connection; off where `target` is a recorder or replay. @default true */
  retryUpstream?: boolean;
}

export interface Shim {
  server: http.Server;
  context: ShimContext;
  /**
   * X9: SIGHUP. Takes the settings that can change while serving (LIVE_KEYS) from `next`;
   * says which changed and were applied, and which changed but need a restart (kept as they are).
   */
  reload(next: Config): { applied: string[]; kept: string[] };
  listen(port?: number, host?: string): Promise<{ port: number; url: string }>;
  /**
   * With `server.adminListen`: the listener that answers the shim's own paths (/healthz, /readyz,
   * /metrics) and nothing else; the public one then answers them with a 404. Undefined without.
   */
  adminServer?: http.Server;
  /** Opens the admin listener (at `server.adminListen`, or where given); undefined without one. */
  listenAdmin(port?: number, host?: string): Promise<{ port: number; url: string } | undefined>;
  /**
   * With `push.relayListen`: the push relay's listener (M7), between the old server and its push
   * bouncer; it answers nothing of the shim's. Undefined without.
   */
  pushRelayServer?: http.Server;
  /** Opens the push relay's listener (at `push.relayListen`, or where given); undefined without one. */
  listenPushRelay(port?: number, host?: string): Promise<{ port: number; url: string } | undefined>;
  /**
   * Serves one request handed over by another server (a Connect/Express app, `http.createServer`)
   * as the shim's own listener would. With `next`, only the intercepted endpoints are answered:
   * any other request (for the upstream, or one of the shim's own paths) is given to `next`
   * untouched.
   */
  handle(req: IncomingMessage, res: ServerResponse, next?: () => void): void;
  /**
   * Whether the shim answers this request itself (an intercepted endpoint, the mobile app's
   * translated requests among them): what `handle` with `next` serves rather than hands on.
   */
  intercepts(req: IncomingMessage): boolean;
  /**
   * Graceful stop: no new connections, in-flight requests (those handed over by `handle` too)
   * get shutdownGraceMs.
   */
  close(): Promise<void>;
}

/** X9: the settings a reload applies without a restart; every other change waits for one. */
const LIVE_KEYS: ReadonlySet<string> = new Set([
  'log.level',
  'log.access',
  'server.realmHosts',
  'server.trustProxy',
  'server.bodyTimeoutMs',
  'server.bodyReadTimeoutMs',
  'server.uploadsPerAddress',
  'server.shutdownGraceMs',
]);

/** The dotted keys whose values differ between two configurations. Pure. */
export function changedKeys(a: Config, b: Config): string[] {
  const out: string[] = [];
  const walk = (x: unknown, y: unknown, path: string) => {
    const isObj = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v);
    if (isObj(x) && isObj(y)) {
      const keys = new Set([...Object.keys(x as object), ...Object.keys(y as object)]);
      for (const k of keys) walk((x as Record<string, unknown>)[k], (y as Record<string, unknown>)[k], path ? `${path}.${k}` : k);
    } else if (JSON.stringify(x) !== JSON.stringify(y)) out.push(path);
  };
  walk(a, b, '');
  return out.sort();
}

/** After a 413, how much more of the body is read and dropped, so the client reads the answer (X6). */
const DISCARD_AFTER_413_BYTES = 64 * 1024 * 1024;
/** …for how long at most… */
const DISCARD_AFTER_413_MS = 10_000;
/** …and no longer than the client keeps sending: a stalled client is not waited for. */
const DISCARD_AFTER_413_IDLE_MS = 1_000;
/** After the drain deadline, how long the last answers get to leave before sockets are cut (X9). */
const FINAL_CLOSE_MS = 1_000;

const missingHost = () => badRequest('Missing Host header: the Zulip organization is chosen by it');
const unknownRealm = () => badRequest('This server hosts no Zulip organization by that Host name');
const notFound = () => new BadRequestError('Not Found', 404);
const shuttingDown = () => new ShimError(503, 'UPSTREAM_UNAVAILABLE', 'zulip-compat-shim is restarting; try again');

/**
 * A 413 a client can read even when it writes its whole body before reading (X6): the answer is
 * written at once, then the rest of the body is read and dropped (up to a bound in bytes and
 * time, and while the client keeps sending), and only then is the response, and by
 * `Connection: close` the socket, ended. Closing with unread bytes in flight would make the
 * client's kernel see a reset, not the answer.
 */
function answerTooLarge(req: IncomingMessage, res: ServerResponse, err: ShimError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = Buffer.from(errorBody(err.code, err.message));
  res.writeHead(err.status, { 'content-type': 'application/json', 'content-length': String(body.length), connection: 'close' });
  res.write(body);
  if (req.complete) {
    res.end();
    return;
  }
  let dropped = 0;
  const done = () => {
    clearTimeout(timer);
    clearTimeout(idle);
    req.off('data', drop).off('end', done).off('error', done);
    res.end();
  };
  const drop = (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > DISCARD_AFTER_413_BYTES) done();
    else idle.refresh();
  };
  const timer = setTimeout(done, DISCARD_AFTER_413_MS);
  const idle = setTimeout(done, DISCARD_AFTER_413_IDLE_MS);
  timer.unref();
  idle.unref();
  req.on('data', drop);
  req.once('end', done);
  req.once('error', done);
  req.resume();
}

/**
 * X15: a request Node handed over as an upgrade, answered as an ordinary one instead: a
 * response on its socket, the offer's headers gone. Its body, if it declares one, was never
 * parsed (Node stops at an upgrade's head): such a request gets a 400, not a guess.
 */
function answerWithoutUpgrade(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  onRequest: (req: IncomingMessage, res: ServerResponse) => void,
): void {
  socket.on('error', () => socket.destroy());
  if (declaresBody(req.headers) || head.length > 0) {
    endSocketWithShimError(socket, badRequest('An upgrade other than WebSocket cannot carry a request body here'));
    return;
  }
  withoutUpgradeOffer(req);
  req.push(null); // no body: the request stream ends, as Node's parser would end it
  const res = new http.ServerResponse(req);
  res.shouldKeepAlive = false;
  res.assignSocket(socket as Socket);
  res.once('finish', () => {
    res.detachSocket(socket as Socket);
    socket.end();
  });
  onRequest(req, res);
}

/** Statuses for requests Node's parser refuses (as Node itself answers them). */
const CLIENT_ERROR_STATUS: Readonly<Record<string, number>> = {
  HPE_HEADER_OVERFLOW: 431,
  HPE_CHUNK_EXTENSIONS_OVERFLOW: 413,
  ERR_HTTP_REQUEST_TIMEOUT: 408,
};

/** X11: the connection cap as configured (`auto`: below the process's descriptor limit), its figures in the metrics. */
function connectionCap(config: Config, metrics: ReturnType<typeof createMetrics>): ConnectionCap {
  const max =
    config.server.maxConnections === 'auto'
      ? autoConnectionCap(descriptorLimit(), config.upstream.maxSockets)
      : config.server.maxConnections;
  const cap = new ConnectionCap(max, {
    counted: (open) => metrics.clientConnections.set(open),
    refused: () => metrics.clientConnectionsRefused.inc(),
    closedIdle: () => metrics.clientConnectionsClosedIdle.inc(),
    passThroughRefused: () => metrics.passedThroughRefused.inc(),
  });
  metrics.passedThroughNow.read = () => cap.passingThrough();
  if (Number.isFinite(max)) {
    metrics.clientConnectionsMax.set(max);
    metrics.passedThroughMax.set(cap.passThroughMax);
  }
  return cap;
}

export function createShim(o: ShimOptions): Shim {
  const { config, log } = o;
  const metrics = createMetrics();
  const observeUpstream = upstreamObserver(metrics);
  // The one way to the upstream, for the pass-through and the shim's own calls alike.
  const transport = createTransport({
    target: o.target,
    timeoutMs: config.upstream.timeoutMs,
    maxSockets: config.upstream.maxSockets,
    insecureTls: config.upstream.insecureTls,
    observe: observeUpstream,
    retry: o.retryUpstream ?? true,
  });
  const client = new UpstreamClient({
    target: o.target,
    timeoutMs: config.upstream.timeoutMs,
    maxSockets: config.upstream.maxSockets,
    insecureTls: config.upstream.insecureTls,
    maxResponseBytes: config.upstream.maxResponseBytes,
    transport,
  });
  let trustedProxies = new TrustedProxies(config.server.trustProxy);
  const replacedProto = new ReplacedProtoWarnings(({ realm, peer, sent, sentOn }) =>
    log.warn(
      { realm, peer, sent, sentOn },
      `X-Forwarded-Proto: ${sent} from ${peer}, a peer not in --trust-proxy (TRUST_PROXY, server.trustProxy), went on as ${sentOn} for ${realm}; if it is your TLS proxy, name it in --trust-proxy, or Zulip takes this realm's browser calls for plain HTTP (a CSRF 403). Said once a realm`,
    ),
  );
  const featureLevels = new FeatureLevels(client, log, { ...config.featureLevel, maxBytes: config.memory.featureLevelsBytes });
  const store = o.store ?? createStore(config, log, metrics);
  metrics.storeProbe.ping = () => store.ping();
  const callers = new Callers(client, metrics, { ...config.lookups, maxBytes: config.memory.callersBytes });
  const admission = new RealmAdmission({
    perMinute: config.presence.newRealmsPerMinute,
    perAddressPerMinute: config.presence.newRealmsPerAddressPerMinute,
    admitted: store,
    addressOf: (req) => clientAddressOf(req, trustedProxies),
    client,
    callers,
    maxKnown: config.presence.maxRealms * 4,
    onRefused: () => metrics.realmsRefused.inc(),
  });
  const parser = new ParsePool(PARSE_POOL);
  const users = new UserDirectory(client, log, metrics, {
    ...config.lookups,
    minRefreshMs: USER_LIST_MIN_REFRESH_MS,
    backend: store.cacheBackend,
    parser,
    maxBytes: config.memory.userDirectoriesBytes,
    maxAnswerBytes: config.memory.largeAnswerBytes,
  });
  const snapshots = new SnapshotHub(
    config.presence.coalesceMs,
    config.presence.maxRealms * 4,
    Date.now,
    config.memory.snapshotsBytes,
    config.memory.answersBytes,
  );
  const context: ShimContext = {
    config,
    log,
    upstreamId: o.upstreamId,
    client,
    featureLevels,
    admission,
    store,
    snapshots,
    replicaSnapshots: o.replicaSnapshots ?? replicaSnapshotsFor(store),
    presence: new PresenceState(config.lookups.maxEntries),
    parser,
    callers,
    metrics,
    users,
  };

  const passThrough: PassThrough = createPassThrough({ target: o.target, transport, insecureTls: config.upstream.insecureTls, log });
  // X11: client connections capped below the descriptors the process may open, passed-through
  // requests to half of them, and uploads per client address.
  const cap = connectionCap(config, metrics);
  const uploads = new UploadSlots(config.server.uploadsPerAddress);

  const countClientRequest = clientRequestCounter(metrics.clientRequestCounts);
  const logRequest = requestLogger(
    log,
    metrics,
    () => config.log.access === 'on',
    () => trustedProxies,
  );
  let admitted = realmHostMatcher(config.server.realmHosts);
  // /readyz asks the upstream as a client of an admitted realm would (X2: no call for another).
  let readyHost = config.server.realmHosts.find((h) => !h.startsWith('*.'));
  // M7: the push relay, on a listener of its own, when asked for.
  const pushRelay = config.push.relayListen
    ? createPushRelay({
        bouncerUrl: config.push.bouncerUrl,
        timeoutMs: config.upstream.timeoutMs,
        bodyLimitBytes: config.server.bodyLimitBytes,
        bodyLimits: () => ({ totalMs: config.server.bodyTimeoutMs, windowMs: config.server.bodyReadTimeoutMs }),
        realm: { lookup: (realm) => featureLevels.info(realm), upstreamId: o.upstreamId, admits: (host) => admitted(host) },
        log,
        metrics,
      })
    : undefined;

  const own: Record<OwnPath, (req: IncomingMessage, res: ServerResponse) => Promise<void>> = {
    '/healthz': async (_req, res) => sendJson(res, 200, { result: 'success', msg: '', status: 'alive' }),
    '/readyz': async (req, res) => {
      const host = admitted(req.headers.host) ? req.headers.host : readyHost;
      const checks: Array<[string, () => Promise<unknown>]> = [
        ['the Zulip server does not answer GET /api/v1/server_settings', () => featureLevels.info(realmOf(o.upstreamId, { host }))],
        [`the ${store.kind === 'redis' ? 'Redis' : 'memory'} store is not reachable`, () => store.ping()],
        ...(o.readinessChecks ?? []).map((check): [string, () => Promise<unknown>] => ['a readiness check failed', check]),
      ];
      for (const [problem, check] of checks) {
        try {
          await check();
        } catch (e) {
          // Our own words: a library's internal wording means little to an operator.
          const detail = e instanceof ShimError || e instanceof UpstreamRefused ? ` (${e.message})` : '';
          sendJson(res, 503, { result: 'error', msg: `not ready: ${problem}${detail}`, code: 'NOT_READY' });
          return;
        }
      }
      sendJson(res, 200, { result: 'success', msg: '', status: 'ready' });
    },
    '/metrics': async (_req, res) => {
      const text = await metrics.registry.metrics();
      res.writeHead(200, { 'content-type': metrics.registry.contentType });
      res.end(text);
    },
  };
  const serveOwn = async (path: OwnPath, req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      sendJson(res, 405, errorBody('BAD_REQUEST', 'Method Not Allowed'), { allow: 'GET, HEAD' });
      return;
    }
    try {
      await own[path](req, res);
    } catch (e) {
      log.error({ err: e }, 'unexpected error in a shim path');
      sendShimError(res, toShimError(e));
    }
  };
  const intercept = async (h: EndpointHandler, req: IncomingMessage, res: ServerResponse) => {
    try {
      await h(req, res, context);
    } catch (e) {
      // E1: an upstream answer that was not a success (a failed server_settings, say) goes on as it came.
      if (e instanceof UpstreamRefused && !res.headersSent) return relayBuffered(res, e.response);
      const err = toShimError(e);
      if (!(e instanceof ShimError)) log.error({ err: e }, 'unexpected error in handler');
      if (err.status === 413) answerTooLarge(req, res, err);
      else sendShimError(res, err);
    }
  };

  /**
   * Why a request for the upstream is answered here instead (undefined: it may go on). X6: Zulip
   * picks the realm by Host, so without one there is nothing to ask it for; X2: a host outside
   * --realm-hosts costs no upstream call.
   */
  const refusal = (req: IncomingMessage): ShimError | undefined =>
    !req.headers.host ? missingHost() : !admitted(req.headers.host) ? unknownRealm() : undefined;

  /** Responses not yet finished, with their request ids, for the drain deadline (X9). */
  const inFlight = new InFlightAnswers();
  /** Requests handed over by `handle` (another server's) whose answers are not done yet. */
  let handedOver = 0;
  /** X9: the drain has begun: no new request is taken, and every answer closes its connection. */
  let draining = false;
  /**
   * Where a request goes: routes.ts's table, and (M2) the mobile app's requests that a newer API
   * changed to the translator. The one decision, for the listener and for `handle` alike.
   */
  const routeFor = (req: IncomingMessage): Route => {
    const routed = routeOf(req.method, req.url);
    return routed.kind === 'upstream' && isTranslatedAppRequest(config.app, req, routed.path)
      ? { ...routed, kind: 'intercepted', handler: appRequestHandler }
      : routed;
  };
  /**
   * X9, X11: a request the shim does not take, answered here (true), before it is logged.
   * `holding`: it would hold an upstream connection for long (passed through, or the app's long poll).
   */
  const turnedAway = (req: IncomingMessage, res: ServerResponse, own: boolean, holding: boolean): boolean => {
    // X9: draining, a request that came on a kept-alive connection is not taken (its client
    // tries again elsewhere, as after nginx's graceful shutdown); the shim's own paths are
    // answered. Either way the connection then closes.
    if (draining) {
      res.shouldKeepAlive = false;
      if (!own) {
        sendShimError(res, shuttingDown(), { 'retry-after': '1' });
        return true;
      }
    }
    // X11: a connection past the cap gets one answer, then closes: what the shim answers itself
    // (its own paths, the intercepted endpoints) is answered, what it only passes on is not.
    const over = cap.overCap(req.socket);
    if (over) res.shouldKeepAlive = false;
    if (!holding) return false;
    // X11: past the cap of passed-through requests, they wait first; the rest is still answered.
    const refused = over ? new TooManyConnectionsError() : !cap.takePassThrough() ? new TooManyPassedThroughError() : undefined;
    if (refused) {
      res.shouldKeepAlive = false;
      sendShimError(res, refused, OVER_CAP_HEADERS);
    }
    return refused !== undefined;
  };
  /** X11: how a body is watched (a 408 logged at warn with what had come); `ended`: once it is all in, or the answer closed. */
  const bodyWatch = (req: IncomingMessage, requestId: string, release: () => void, ended?: () => void): BodyWatch => ({
    release,
    timedOut: (facts: BodyTimeout) => {
      metrics.bodyTimeouts.inc({ reason: facts.reason });
      log.warn({ reqId: requestId, path: loggablePath(req.url), ...facts }, 'request body too slow: answered 408');
    },
    ...(ended ? { ended } : {}),
  });
  const bodyLimits = () => ({ totalMs: config.server.bodyTimeoutMs, windowMs: config.server.bodyReadTimeoutMs });
  /** A request on its way in; `routed`: its route, when `handle` has already decided it. */
  const onRequest = (req: IncomingMessage, res: ServerResponse, routed?: Route) => {
    try {
      // X15: an absolute-form target names the realm; it goes on in origin form.
      if (!toOriginForm(req)) {
        sendShimError(res, badRequest('Malformed request target'), { connection: 'close' });
        return;
      }
      // X4, before anything reads them
      const replaced = distrustForwarded(req, trustedProxies);
      if (replaced) replacedProto.replaced(req, replaced.proto);
      const route = routed ?? routeFor(req);
      // With --admin-listen, the shim's own paths are answered on that listener only.
      const own = route.kind === 'own' && !admin;
      const gate = own ? undefined : refusal(req);
      const passing = route.kind === 'upstream' && !gate;
      // X11: what holds an upstream connection for long counts against the pass-through's share:
      // a request passed through, and the app's long poll the translator takes (M2).
      const holding = passing || (route.kind === 'intercepted' && route.longPoll && !gate);
      cap.requestStarted(req.socket);
      if (turnedAway(req, res, own, holding)) return;
      serve(req, res, route, own, gate, passing, holding);
    } catch (e) {
      // E4: a fault on the way in costs this request a 500, never the process.
      log.error({ err: e }, 'unexpected error routing a request');
      sendShimError(res, toShimError(e));
    }
  };
  /**
   * T1, X11: a request passed through. One whose body is still to come once what came with its
   * head is read (passthrough.ts) is an upload: it takes a slot of its client address until the
   * body is in, or is answered 503 past server.uploadsPerAddress.
   */
  const passOn = (req: IncomingMessage, res: ServerResponse, route: Route, requestId: string): PassThroughExchange => {
    if (!bodyToCome(req)) return passThrough.web(req, res, requestId, route);
    let slot: string | undefined;
    const admitUpload = () => {
      const address = clientAddressOf(req, trustedProxies);
      if (uploads.take(address)) {
        slot = address;
        return true;
      }
      metrics.uploadsRefused.inc();
      res.shouldKeepAlive = false;
      sendShimError(res, new TooManyUploadsError(uploads.perAddress), { 'x-request-id': requestId, connection: 'close' });
      return false;
    };
    const exchange = passThrough.web(req, res, requestId, route, admitUpload);
    const ended = () => {
      if (slot !== undefined) uploads.release(slot);
      slot = undefined;
    };
    // X11: a body that stops arriving ends its upstream request (and frees its slot) with a 408.
    watchBody(
      req,
      res,
      bodyLimits(),
      { 'x-request-id': requestId },
      bodyWatch(req, requestId, () => exchange.closed(), ended),
    );
    return exchange;
  };
  /**
   * A request taken: logged, in the drain's list, and answered by its route; `passing`: passed
   * through; `holding`: its pass-through slot taken (turnedAway).
   */
  const serve = (
    req: IncomingMessage,
    res: ServerResponse,
    route: Route,
    own: boolean,
    gate: ShimError | undefined,
    passing: boolean,
    holding: boolean,
  ) => {
    const logged = logRequest(req, res, route.label, own);
    let exchange: PassThroughExchange | undefined;
    // The one listener for all that ends with the answer: the drain list, the log line and
    // metrics, the connection's idle time, and a pass-through's upstream request and slot.
    const answer = inFlight.add(res, logged.requestId);
    const socket = req.socket; // detached from the request by the time its answer closes
    res.on('close', () => {
      answer.remove();
      logged.closed();
      if (!own) countClientRequest(req);
      cap.answerClosed(socket);
      exchange?.closed();
      if (holding) cap.passThroughEnded();
    });
    if (passing) {
      // The pass-through writes the request id into its one answer head.
      exchange = passOn(req, res, route, logged.requestId);
      return;
    }
    // Every answer the shim writes itself carries the request id.
    res.setHeader('x-request-id', logged.requestId);
    if (route.kind === 'own' && own) {
      void serveOwn(route.path, req, res);
      return;
    }
    if (gate) {
      sendShimError(res, gate, req.headers.host ? {} : { connection: 'close' });
      return;
    }
    if (route.kind === 'own') {
      // Served on the admin listener: here a Zulip-shaped 404 (Zulip has no such path), no upstream call.
      sendShimError(res, notFound());
      return;
    }
    if (route.kind === 'intercepted') {
      // X11: no upstream request to release (the handler has none before the body is in).
      watchBody(
        req,
        res,
        bodyLimits(),
        {},
        bodyWatch(req, logged.requestId, () => {}),
      );
      // Handlers see the path the upstream's router sees, with the query as sent.
      const q = req.url?.indexOf('?') ?? -1;
      req.url = encodePath(route.path) + (q >= 0 ? req.url!.slice(q) : '');
      void intercept(route.handler, req, res);
    }
  };
  const server = http.createServer({ requireHostHeader: false }, onRequest);
  /** --admin-listen: the shim's own paths only, on a listener of their own; anything else a 404. */
  const onAdminRequest = (req: IncomingMessage, res: ServerResponse) => {
    try {
      const route = routeOf(req.method, req.url);
      const logged = logRequest(req, res, route.label, true);
      res.on('close', () => logged.closed());
      res.setHeader('x-request-id', logged.requestId);
      if (route.kind === 'own') void serveOwn(route.path, req, res);
      else sendShimError(res, notFound());
    } catch (e) {
      log.error({ err: e }, 'unexpected error routing a request on the admin listener');
      sendShimError(res, toShimError(e));
    }
  };
  const admin = config.server.adminListen ? http.createServer({ requireHostHeader: false }, onAdminRequest) : undefined;
  /** Listeners besides the public one: they stop with it (X9). */
  const sideServers = [admin, pushRelay?.server].filter((s): s is http.Server => s !== undefined);
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    // X15: another upgrade (h2c) is an offer the shim does not take up: the request is answered
    // as HTTP/1.1, on this connection, which then closes.
    if (!isWebSocketUpgrade(req)) {
      answerWithoutUpgrade(req, socket, head, onRequest);
      return;
    }
    // X11: a WebSocket is passed through for as long as it is open: past the cap, it waits first.
    cap.requestStarted(socket);
    if (cap.overCap(socket) || !cap.takePassThrough()) {
      socket.on('error', () => socket.destroy());
      refuseOverCap(socket);
      return;
    }
    socket.once('close', () => cap.passThroughEnded());
    if (!toOriginForm(req)) {
      socket.on('error', () => socket.destroy());
      endSocketWithShimError(socket, badRequest('Malformed request target'));
      return;
    }
    const replaced = distrustForwarded(req, trustedProxies); // X4
    if (replaced) replacedProto.replaced(req, replaced.proto);
    // The same gate as for every other request, before the upstream hears of it.
    const refused = refusal(req);
    if (refused) {
      socket.on('error', () => socket.destroy());
      endSocketWithShimError(socket, refused);
      return;
    }
    passThrough.ws(req, socket, head);
  });
  server.on('clientError', (err, socket) => {
    const code = (err as NodeJS.ErrnoException).code;
    // Node's own rule: answer only where no answer to an earlier request is being written.
    const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (code !== 'ECONNRESET' && socket.writable && !inFlight?.headersSent) {
      const status = CLIENT_ERROR_STATUS[code ?? ''] ?? 400;
      endSocketWithShimError(socket, new BadRequestError(`Malformed HTTP request: ${STATUS_CODES[status]}`, status));
    } else socket.destroy();
    log.debug({ err: { code } }, 'client error');
  });
  // No tunnels through the shim (E4: an answer all the same, not a dropped connection).
  server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => socket.destroy());
    endSocketWithShimError(socket, new BadRequestError('CONNECT is not supported', 405));
  });
  // Long polls (GET /events, ~90 s) must never be cut by the shim's own server timeouts.
  allowLongPolls(server);
  cap.watch(server);

  let closing: Promise<void> | undefined;
  return {
    server,
    context,
    reload(next) {
      const changed = changedKeys(config, next);
      const applied = changed.filter((k) => LIVE_KEYS.has(k));
      for (const key of applied) {
        if (key === 'log.level') log.level = next.log.level;
        if (key === 'server.realmHosts') {
          admitted = realmHostMatcher(next.server.realmHosts);
          readyHost = next.server.realmHosts.find((h) => !h.startsWith('*.'));
        }
        if (key === 'server.trustProxy') trustedProxies = new TrustedProxies(next.server.trustProxy);
      }
      // Read where they are used, per request or at shutdown: the new values take effect now.
      config.log.level = next.log.level;
      config.log.access = next.log.access;
      config.server.realmHosts = next.server.realmHosts;
      config.server.trustProxy = next.server.trustProxy;
      config.server.bodyTimeoutMs = next.server.bodyTimeoutMs;
      config.server.bodyReadTimeoutMs = next.server.bodyReadTimeoutMs;
      config.server.uploadsPerAddress = uploads.perAddress = next.server.uploadsPerAddress;
      config.server.shutdownGraceMs = next.server.shutdownGraceMs;
      return { applied, kept: changed.filter((k) => !LIVE_KEYS.has(k)) };
    },
    listen(port = config.server.port, host = config.server.host) {
      return listen(server, port, host);
    },
    handle(req, res, next) {
      // Decided once, here when `next` needs it (routeOf reads an absolute-form target as its path).
      const route = next ? routeFor(req) : undefined;
      if (route && route.kind !== 'intercepted') {
        next!();
        return;
      }
      // Another server's request after close(): no listener of ours to stop accepting it.
      if (closing) {
        sendShimError(res, shuttingDown(), { 'retry-after': '1' });
        return;
      }
      // Its connection is not the shim's: the drain waits for its answer by this count.
      handedOver++;
      res.once('close', () => {
        handedOver--;
      });
      onRequest(req, res, route);
    },
    intercepts: (req) => routeFor(req).kind === 'intercepted',
    ...(admin ? { adminServer: admin } : {}),
    async listenAdmin(port?: number, host?: string) {
      if (!admin || !config.server.adminListen) return undefined;
      const at = parseListenAddress(config.server.adminListen);
      return listen(admin, port ?? at.port, host ?? at.host);
    },
    ...(pushRelay ? { pushRelayServer: pushRelay.server } : {}),
    async listenPushRelay(port?: number, host?: string) {
      if (!pushRelay || !config.push.relayListen) return undefined;
      const at = parseListenAddress(config.push.relayListen);
      return pushRelay.listen(port ?? at.port, host ?? at.host);
    },
    close() {
      if (closing) return closing;
      const drainEnds = Date.now() + config.server.shutdownGraceMs;
      // X9: each answer from now on says `Connection: close`, those in flight too (a held long
      // poll's), so no connection outlives the answer it is carrying.
      draining = true;
      for (const { res } of inFlight) if (!res.headersSent) res.shouldKeepAlive = false;
      closing = new Promise<void>((resolve) => {
        // X9: at the drain deadline, a request still waiting for its answer (a held long poll,
        // say) gets a Zulip-shaped 503 and `Connection: close`, not a reset; an answer already
        // streaming cannot be ended cleanly and is cut. Whatever is left goes a moment later.
        const deadline = setTimeout(() => {
          for (const { res, requestId } of inFlight) {
            if (res.headersSent) res.destroy();
            else sendShimError(res, shuttingDown(), { connection: 'close', 'retry-after': '1', 'x-request-id': requestId });
          }
          // WebSocket tunnels are dropped now. (The shared transport is closed after the server,
          // below: client.destroy() would be a no-op here, the client does not own it.)
          void passThrough.close();
          setTimeout(() => {
            server.closeAllConnections();
            for (const side of sideServers) side.closeAllConnections();
          }, FINAL_CLOSE_MS).unref();
        }, config.server.shutdownGraceMs);
        deadline.unref();
        // A kept-alive connection goes idle when its in-flight request ends: close it then,
        // rather than holding shutdown for the whole grace period.
        // Answers to requests handed over by `handle` keep no connection of the shim's open:
        // the drain waits for them by their count (the listeners' own requests hold their
        // connections, which the servers' close waits for).
        let serversClosed = false;
        const drained = () => {
          clearTimeout(deadline);
          clearInterval(sweep);
          resolve();
        };
        const sweep = setInterval(() => {
          server.closeIdleConnections();
          for (const side of sideServers) side.closeIdleConnections();
          if (serversClosed && handedOver === 0) drained();
        }, 100);
        sweep.unref();
        // The admin and push relay listeners (if any) stop with the public one; all closed ends the drain.
        const listening = sideServers.filter((side) => side.listening);
        let open = 1 + listening.length;
        const closed = () => {
          if (--open > 0) return;
          serversClosed = true;
          if (handedOver === 0) drained();
        };
        server.close(closed);
        for (const side of listening) side.close(closed);
        server.closeIdleConnections();
        for (const side of sideServers) side.closeIdleConnections();
      }).then(async () => {
        // A presence refresh whose leader already had its answer (B7) ends within the same deadline.
        await snapshots.settled(drainEnds - Date.now());
        await passThrough.close();
        await pushRelay?.close();
        await transport.close();
        await parser.close();
        if (!o.store) await store.close(); // a store passed in belongs to the caller
      });
      return closing;
    },
  };
}
