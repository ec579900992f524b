import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { appRequestHandler, isTranslatedAppRequest } from './app/handler.js';
import type { EndpointHandler, ShimContext } from './context.js';
import { bodyToCome, watchBody, type BodyTimeout, type BodyWatch } from './http/body-deadline.js';
import {
  OVER_CAP_HEADERS,
  refuseOverCap,
  TooManyConnectionsError,
  TooManyPassedThroughError,
  type ConnectionCap,
} from './http/connection-cap.js';
import { shuttingDown } from './http/drain.js';
import { badRequest, endSocketWithShimError, NotFoundError, sendShimError, ShimError, toShimError } from './http/errors.js';
import { distrustForwarded, ReplacedProtoWarnings } from './http/forwarded.js';
import type { InFlightAnswers } from './http/in-flight.js';
import type { ServeOwn } from './http/own-paths.js';
import { isWebSocketUpgrade, toOriginForm } from './http/request-target.js';
import { answerTooLarge } from './http/too-large.js';
import { answerWithoutUpgrade } from './http/unusual-requests.js';
import { TooManyUploadsError } from './http/upload-slots.js';
import type { LiveSettings } from './live-settings.js';
import { loggablePath } from './observability/logger.js';
import { requestLogger } from './observability/request-log.js';
import { clientRequestCounter } from './observability/client-requests.js';
import type { PassThrough, PassThroughExchange } from './proxy/passthrough.js';
import { encodePath, routeOf, type Route } from './routes.js';

/**
 * A request comes in; its route is decided once (routes.ts): one of the shim's own paths, an
 * intercepted handler, or the pass-through, which streams it to the upstream untouched. Here it
 * is taken in (X15's target, X4's headers), let through or turned away (X2, X9, X11), logged and
 * counted, and given to what answers it.
 */

export interface DispatchOptions {
  /** What the handlers are given; its configuration, log and metrics serve the dispatch too. */
  context: ShimContext;
  live: LiveSettings;
  /** X11: client connections, and the pass-through's share of them. */
  cap: ConnectionCap;
  passThrough: PassThrough;
  /** Responses not yet finished, with their request ids, for the drain deadline (X9). */
  inFlight: InFlightAnswers;
  serveOwn: ServeOwn;
  /** With `server.adminListen`, the shim's own paths are answered on that listener only. */
  ownPathsElsewhere: boolean;
  /** The registry's change ids (changes/index.ts CHANGE_IDS): the values client_requests_total's `change` may take. */
  changeIds: ReadonlySet<string>;
}

/** How a request is dealt with, decided once from its route and its gate. */
export interface Decision {
  /** One of the shim's own paths, answered on this listener. */
  own: boolean;
  /** Why it is answered here instead of going on (no Host, a Host outside server.realmHosts). */
  gate: ShimError | undefined;
  /** Passed through to the upstream. */
  passing: boolean;
  /** X11: holds an upstream connection for long (passed through, or the app's long poll the translator takes, M2). */
  holding: boolean;
}

/** How a request is dealt with (Decision). Pure. */
export function decide(route: Route, ownPathsHere: boolean, gate: () => ShimError | undefined): Decision {
  const own = route.kind === 'own' && ownPathsHere;
  const refused = own ? undefined : gate();
  const passing = route.kind === 'upstream' && !refused;
  const holding = passing || (route.kind === 'intercepted' && route.longPoll && !refused);
  return { own, gate: refused, passing, holding };
}

const missingHost = () => badRequest('Missing Host header: the Zulip organization is chosen by it');
const unknownRealm = () => badRequest('This server hosts no Zulip organization by that Host name');
const notFound = () => new NotFoundError();

export class Dispatcher {
  /** X9: the drain has begun: no new request is taken, and every answer closes its connection. */
  draining = false;
  /** Requests handed over by `handle` (another server's) whose answers are not done yet. */
  handedOver = 0;
  private readonly logRequest: ReturnType<typeof requestLogger>;
  private readonly countClientRequest: ReturnType<typeof clientRequestCounter>;
  private readonly replacedProto: ReplacedProtoWarnings;

  constructor(private readonly o: DispatchOptions) {
    const { log, metrics } = o.context;
    this.logRequest = requestLogger(
      log,
      metrics,
      () => o.live.accessLog,
      () => o.live.trustedProxies,
    );
    this.countClientRequest = clientRequestCounter(metrics.clientRequestCounts, o.changeIds);
    this.replacedProto = new ReplacedProtoWarnings(({ realm, peer, sent, sentOn }) =>
      log.warn(
        { realm, peer, sent, sentOn },
        `X-Forwarded-Proto: ${sent} from ${peer}, a peer not in --trust-proxy (TRUST_PROXY, server.trustProxy), went on as ${sentOn} for ${realm}; if it is your TLS proxy, name it in --trust-proxy, or Zulip takes this realm's browser calls for plain HTTP (a CSRF 403). Said once a realm`,
      ),
    );
  }

  /**
   * Where a request goes: routes.ts's table, and (M2) the mobile app's requests that a newer API
   * changed to the translator. The one decision, for the listener and for `handle` alike.
   */
  routeFor(req: IncomingMessage): Route {
    const routed = routeOf(req.method, req.url);
    return routed.kind === 'upstream' && isTranslatedAppRequest(this.o.context.config.app, req, routed.path)
      ? { ...routed, kind: 'intercepted', handler: appRequestHandler }
      : routed;
  }

  /**
   * Why a request for the upstream is answered here instead (undefined: it may go on). X6: Zulip
   * picks the realm by Host, so without one there is nothing to ask it for; X2: a host outside
   * --realm-hosts costs no upstream call.
   */
  refusal(req: IncomingMessage): ShimError | undefined {
    return !req.headers.host ? missingHost() : !this.o.live.admits(req.headers.host) ? unknownRealm() : undefined;
  }

  /** Responses not yet finished (X9). */
  get inFlight(): InFlightAnswers {
    return this.o.inFlight;
  }

  /** A request on its way in; `routed`: its route, when `handle` has already decided it. */
  readonly onRequest = (req: IncomingMessage, res: ServerResponse, routed?: Route): void => {
    try {
      // X15: an absolute-form target names the realm; it goes on in origin form.
      if (!toOriginForm(req)) {
        sendShimError(res, badRequest('Malformed request target'), { connection: 'close' });
        return;
      }
      this.distrustForwarded(req);
      this.dispatch(routed ?? this.routeFor(req), req, res);
    } catch (e) {
      // E4: a fault on the way in costs this request a 500, never the process.
      this.o.context.log.error({ err: e }, 'unexpected error routing a request');
      sendShimError(res, toShimError(e));
    }
  };

  /** A request taken in, by its route: turned away, or served. */
  dispatch(route: Route, req: IncomingMessage, res: ServerResponse): void {
    const decision = decide(route, !this.o.ownPathsElsewhere, () => this.refusal(req));
    this.o.cap.requestStarted(req.socket);
    if (this.turnedAway(req, res, decision)) return;
    this.serve(req, res, route, decision);
  }

  /** --admin-listen: the shim's own paths only, on a listener of their own; anything else a 404. */
  readonly onAdminRequest = (req: IncomingMessage, res: ServerResponse): void => {
    try {
      const route = routeOf(req.method, req.url);
      const logged = this.logRequest(req, res, route.label, true);
      res.on('close', () => logged.closed());
      res.setHeader('x-request-id', logged.requestId);
      if (route.kind === 'own') void this.o.serveOwn(route.path, req, res);
      else sendShimError(res, notFound());
    } catch (e) {
      this.o.context.log.error({ err: e }, 'unexpected error routing a request on the admin listener');
      sendShimError(res, toShimError(e));
    }
  };

  /** An upgrade: a WebSocket is passed through; any other offer (h2c) is answered as HTTP/1.1 (X15). */
  readonly onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    // X15: another upgrade (h2c) is an offer the shim does not take up: the request is answered
    // as HTTP/1.1, on this connection, which then closes.
    if (!isWebSocketUpgrade(req)) {
      answerWithoutUpgrade(req, socket, head, this.onRequest);
      return;
    }
    // X11: a WebSocket is passed through for as long as it is open: past the cap, it waits first.
    const { cap } = this.o;
    cap.requestStarted(socket);
    if (cap.overCap(socket) || !cap.takePassThrough()) {
      socket.on('error', () => socket.destroy());
      refuseOverCap(socket);
      return;
    }
    socket.once('close', () => cap.passThroughEnded());
    // The same gate as for every other request, before the upstream hears of it.
    let refused: ShimError | undefined = badRequest('Malformed request target');
    if (toOriginForm(req)) {
      this.distrustForwarded(req);
      refused = this.refusal(req);
    }
    if (refused) {
      socket.on('error', () => socket.destroy());
      endSocketWithShimError(socket, refused);
      return;
    }
    this.o.passThrough.ws(req, socket, head);
  };

  /** X4, before anything reads them: X-Forwarded-* from a peer not trusted is replaced. */
  private distrustForwarded(req: IncomingMessage): void {
    const replaced = distrustForwarded(req, this.o.live.trustedProxies);
    if (replaced) this.replacedProto.replaced(req, replaced.proto);
  }

  /**
   * X9, X11: a request the shim does not take, answered here (true), before it is logged.
   * `holding`: it would hold an upstream connection for long (passed through, or the app's long poll).
   */
  private turnedAway(req: IncomingMessage, res: ServerResponse, { own, holding }: Decision): boolean {
    // X9: draining, a request that came on a kept-alive connection is not taken (its client
    // tries again elsewhere, as after nginx's graceful shutdown); the shim's own paths are
    // answered. Either way the connection then closes.
    if (this.draining) {
      res.shouldKeepAlive = false;
      if (!own) {
        sendShimError(res, shuttingDown(), { 'retry-after': '1' });
        return true;
      }
    }
    // X11: a connection past the cap gets one answer, then closes: what the shim answers itself
    // (its own paths, the intercepted endpoints) is answered, what it only passes on is not.
    const { cap } = this.o;
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
  }

  /** A request taken: logged, in the drain's list, and answered by its route. */
  private serve(req: IncomingMessage, res: ServerResponse, route: Route, decision: Decision): void {
    const logged = this.logRequest(req, res, route.label, decision.own);
    let exchange: PassThroughExchange | undefined;
    // The one listener for all that ends with the answer: the drain list, the log line and
    // metrics, the connection's idle time, and a pass-through's upstream request and slot.
    const answer = this.o.inFlight.add(res, logged.requestId);
    const socket = req.socket; // detached from the request by the time its answer closes
    res.on('close', () => {
      answer.remove();
      logged.closed();
      if (!decision.own) this.countClientRequest(req);
      this.o.cap.answerClosed(socket);
      exchange?.closed();
      if (decision.holding) this.o.cap.passThroughEnded();
    });
    if (decision.passing) {
      // The pass-through writes the request id into its one answer head.
      exchange = this.passOn(req, res, route, logged.requestId);
      return;
    }
    // Every answer the shim writes itself carries the request id.
    res.setHeader('x-request-id', logged.requestId);
    this.answerHere(req, res, route, decision, logged.requestId);
  }

  /** A request the shim answers itself: its own paths, a refusal, or an intercepted endpoint. */
  private answerHere(req: IncomingMessage, res: ServerResponse, route: Route, { own, gate }: Decision, requestId: string): void {
    if (route.kind === 'own' && own) {
      void this.o.serveOwn(route.path, req, res);
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
        this.o.live.bodyLimits(),
        {},
        this.bodyWatch(req, requestId, () => {}),
      );
      // Handlers see the path the upstream's router sees, with the query as sent.
      const q = req.url?.indexOf('?') ?? -1;
      req.url = encodePath(route.path) + (q >= 0 ? req.url!.slice(q) : '');
      void this.intercept(route.handler, req, res);
    }
  }

  /**
   * T1, X11: a request passed through. One whose body is still to come once what came with its
   * head is read (passthrough.ts) is an upload: it takes a slot of its client address until the
   * body is in, or is answered 503 past server.uploadsPerAddress.
   */
  private passOn(req: IncomingMessage, res: ServerResponse, route: Route, requestId: string): PassThroughExchange {
    const { passThrough, live, context } = this.o;
    if (!bodyToCome(req)) return passThrough.web(req, res, requestId, route);
    let slot: string | undefined;
    const admitUpload = () => {
      const address = live.clientAddressOf(req);
      if (live.uploads.take(address)) {
        slot = address;
        return true;
      }
      context.metrics.uploadsRefused.inc();
      res.shouldKeepAlive = false;
      sendShimError(res, new TooManyUploadsError(live.uploads.perAddress), { 'x-request-id': requestId, connection: 'close' });
      return false;
    };
    const exchange = passThrough.web(req, res, requestId, route, admitUpload);
    const ended = () => {
      if (slot !== undefined) live.uploads.release(slot);
      slot = undefined;
    };
    // X11: a body that stops arriving ends its upstream request (and frees its slot) with a 408.
    watchBody(
      req,
      res,
      live.bodyLimits(),
      { 'x-request-id': requestId },
      this.bodyWatch(req, requestId, () => exchange.closed(), ended),
    );
    return exchange;
  }

  /** An intercepted endpoint's handler, its faults answered as Zulip shapes them (E1, E2, E4). */
  private async intercept(h: EndpointHandler, req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      await h(req, res, this.o.context);
    } catch (e) {
      const err = toShimError(e);
      if (!(e instanceof ShimError)) this.o.context.log.error({ err: e }, 'unexpected error in handler');
      if (err.status === 413) answerTooLarge(req, res, err);
      else sendShimError(res, err);
    }
  }

  /** X11: how a body is watched (a 408 logged at warn with what had come); `ended`: once it is all in, or the answer closed. */
  private bodyWatch(req: IncomingMessage, requestId: string, release: () => void, ended?: () => void): BodyWatch {
    const { metrics, log } = this.o.context;
    return {
      release,
      timedOut: (facts: BodyTimeout) => {
        metrics.bodyTimeouts.inc({ reason: facts.reason });
        log.warn({ reqId: requestId, path: loggablePath(req.url), ...facts }, 'request body too slow: answered 408');
      },
      ...(ended ? { ended } : {}),
    };
  }
}
