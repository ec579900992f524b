import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import { bodyToCome } from '../http/body-deadline.js';
import { badRequest, sendShimError, ShimError, upstreamUnavailable } from '../http/errors.js';
import { setXForwarded } from '../http/forwarded.js';
import { copyEndToEnd, declaresBody, endToEndList } from '../http/headers.js';
import { loggablePath, type Logger } from '../observability/logger.js';
import type { RouteFacts } from '../http/api-routes.js';
import { isClientAbort, isUnsendable, type Transport, type UpstreamDispatchOptions } from '../upstream/transport.js';
import { webSocketForwarder } from './websocket.js';

/**
 * T1: everything the shim does not handle itself is streamed to the upstream and back,
 * unbuffered, with method, path, query, headers and body unchanged, `Host` kept and
 * X-Forwarded-For/Proto/Host added (X4), over kept-alive connections.
 *
 * Read like node-http-proxy's `web-incoming` / `web-outgoing`: an ordered list of small named
 * passes over one request (WEB_INCOMING), and over its answer (WEB_OUTGOING). HTTP requests
 * go through the shim's one upstream transport (timeouts, long-poll pool, X5 retry, metrics);
 * WebSocket upgrades through http-proxy-3, which has no equal there (websocket.ts).
 */
export interface PassThroughOptions {
  target: string;
  /** The shim's upstream transport (upstream/transport.ts). */
  transport: Transport;
  insecureTls: boolean;
  log: Logger;
}

export interface PassThrough {
  /**
   * `requestId` goes on the answer; `route`, as the router decided it, gives the upstream
   * metrics their label and says whether the request is a long poll (its own upstream pool, T1).
   * The caller calls the returned exchange's `closed()` when the answer closes (the upstream
   * request ends with it), from the one `close` listener it has anyway.
   *
   * X11: a request with a body is sent on a turn of the event loop later (`setImmediate`), once
   * Node's parser has read what came with its head: a body that came whole goes with the other
   * requests, one still to come is an upload, to the uploads' own upstream pool, and only if
   * `admitUpload` says so (it answers the request itself when not).
   */
  web(
    req: IncomingMessage,
    res: ServerResponse,
    requestId: string,
    route: Pick<RouteFacts, 'label' | 'longPoll'>,
    admitUpload?: () => boolean,
  ): PassThroughExchange;
  ws(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  close(): Promise<void>;
}

/** One request on its way through: what the passes build, then the undici handler of its answer. */
export class PassThroughExchange implements Dispatcher.DispatchHandler {
  readonly options: UpstreamDispatchOptions;
  /** Headers the answer carries besides the upstream's, as a name/value list (the request id). */
  readonly answerHeaders: string[] = [];
  controller: Dispatcher.DispatchController | undefined;
  clientGone = false;
  /** The upstream exchange has ended (answered or failed): nothing is left to abort. */
  settled = false;

  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    readonly log: Logger,
  ) {
    this.options = { method: req.method as Dispatcher.HttpMethod, path: req.url ?? '/', headers: {}, body: null, passThrough: true };
  }

  get headers(): Record<string, string | string[]> {
    return this.options.headers as Record<string, string | string[]>;
  }

  onRequestStart(c: Dispatcher.DispatchController): void {
    this.controller = c;
    if (this.clientGone) c.abort(new ClientGone());
  }
  onResponseStart(_c: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (statusCode < 200) return; // 1xx: Node answers `Expect` itself
    for (const pass of WEB_OUTGOING) pass.onHeaders?.(this, statusCode, headers);
  }
  onResponseData(c: Dispatcher.DispatchController, chunk: Buffer): void {
    for (const pass of WEB_OUTGOING) pass.onData?.(this, c, chunk);
  }
  onResponseEnd(): void {
    this.settled = true;
    this.res.end();
  }
  onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    this.settled = true;
    if (!this.clientGone) fail(this, err);
  }

  /**
   * The answer closed: a client that went away, or an answer the shim ended itself (the drain
   * deadline's 503, X9), ends the upstream request too, so nothing is left behind upstream.
   */
  closed(): void {
    if (this.settled) return;
    this.clientGone = true;
    this.controller?.abort(new ClientGone());
  }
}

class ClientGone extends Error {
  override name = 'AbortError';
  constructor() {
    super('client closed the connection');
  }
}

// ---- web-incoming: what happens to the request, in order ------------------------------------

/** A named step over an outgoing request. */
export type IncomingPass = (exchange: PassThroughExchange) => void;

/** RFC 9110 §7.6.1: connection-level headers stay on this hop; the rest is copied once. */
export const dropHopByHop: IncomingPass = (exchange) => {
  copyEndToEnd(exchange.req.headers, exchange.headers);
};

/** T1, X4: X-Forwarded-For appended to; Proto and Host as the shim (or a trusted proxy) knows them. */
export const addForwarded: IncomingPass = (exchange) => {
  setXForwarded(exchange.req, exchange.headers);
};

/** The client's body, streamed as it comes (none when it declares none). */
export const pipeBody: IncomingPass = (exchange) => {
  if (declaresBody(exchange.req.headers)) exchange.options.body = exchange.req;
};

/** The upstream request ends with the answer (PassThroughExchange.closed), for a caller with no `close` listener of its own. */
export const abortWithClient: IncomingPass = (exchange) => {
  exchange.res.on('close', () => exchange.closed());
};

/**
 * The passes of every request, in order. The pool is picked by the transport itself (long
 * polls to their own pool, `routeLongPolls`), which then sends it. The upstream request ends
 * with the answer through the server's `close` listener (`web` returns the exchange for it).
 */
export const WEB_INCOMING: readonly IncomingPass[] = [dropHopByHop, addForwarded, pipeBody];

// ---- web-outgoing: what happens to the answer -----------------------------------------------

export interface OutgoingPass {
  onHeaders?(exchange: PassThroughExchange, statusCode: number, headers: IncomingHttpHeaders): void;
  onData?(exchange: PassThroughExchange, c: Dispatcher.DispatchController, chunk: Buffer): void;
}

/**
 * The upstream's status and end-to-end headers, as they came (E1), and the shim's own: the
 * whole head in one call, as a flat list (Node's quickest way to write one).
 */
export const writeHeaders: OutgoingPass = {
  onHeaders(exchange, statusCode, headers) {
    exchange.res.writeHead(statusCode, endToEndList(headers, exchange.answerHeaders));
  },
};

/** Backpressure: a slow client slows the upstream read; nothing piles up here. */
export const streamBody: OutgoingPass = {
  onData(exchange, c, chunk) {
    if (!exchange.res.write(chunk)) {
      c.pause();
      exchange.res.once('drain', () => c.resume());
    }
  },
};

export const WEB_OUTGOING: readonly OutgoingPass[] = [writeHeaders, streamBody];

// ---- failures -------------------------------------------------------------------------------

function fail(exchange: PassThroughExchange, err: Error): void {
  const { res } = exchange;
  // The client left, or the shim already answered (X9 drain): nothing more to write.
  if (res.destroyed || res.writableEnded || isClientAbort(err)) return;
  // The shim's answer in place of the upstream's carries the shim's own headers all the same
  // (none can be added to an answer already started: that one is cut).
  const own: Record<string, string> = {};
  for (let i = 0; i < exchange.answerHeaders.length; i += 2) own[exchange.answerHeaders[i]!] = exchange.answerHeaders[i + 1]!;
  if (isUnsendable(err)) {
    // A request that cannot be sent on as it came (`OPTIONS *`, say) is the client's error,
    // not the upstream's: 400, not 502 (E2).
    sendShimError(res, badRequest(`This request cannot be passed to the Zulip server: ${err.message}`), own);
    return;
  }
  const e = err instanceof ShimError ? err : upstreamUnavailable((err as NodeJS.ErrnoException).code ?? 'error');
  exchange.log.warn({ err: e, path: loggablePath(exchange.options.path) }, 'upstream error on pass-through');
  sendShimError(res, e, own); // destroys the socket when the answer had already started
}

// ---- the pass-through -----------------------------------------------------------------------

export function createPassThrough(o: PassThroughOptions): PassThrough {
  const dispatch = o.transport.dispatch;
  /** A request with a body, a turn later (see `web`): an upload when its body is still to come. */
  const sendBody = (exchange: PassThroughExchange, admitUpload: (() => boolean) | undefined) => {
    if (exchange.clientGone) return;
    exchange.options.upload = bodyToCome(exchange.req);
    if (exchange.options.upload && admitUpload && !admitUpload()) return;
    dispatch(exchange.options, exchange);
  };
  const upgrades = webSocketForwarder({
    target: o.target,
    insecureTls: o.insecureTls,
    log: o.log,
    failure: 'upstream error on a WebSocket upgrade',
  });

  return {
    web(req, res, requestId, route, admitUpload) {
      const exchange = new PassThroughExchange(req, res, o.log);
      exchange.options.route = route.label;
      exchange.options.longPoll = route.longPoll;
      exchange.answerHeaders.push('x-request-id', requestId);
      for (const pass of WEB_INCOMING) pass(exchange);
      if (exchange.options.body === null) dispatch(exchange.options, exchange);
      else setImmediate(sendBody, exchange, admitUpload);
      return exchange;
    },
    ws(req, socket, head) {
      setXForwarded(req, req.headers);
      upgrades.ws(req, socket, head);
    },
    close: () => upgrades.close(),
  };
}
