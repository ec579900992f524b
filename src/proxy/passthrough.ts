import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import { createProxyServer } from 'http-proxy-3';
import { Pool, errors as undiciErrors, type Dispatcher } from 'undici';
import { badRequest, errorBody, upstreamTimeout, upstreamUnavailable } from '../http/errors.js';
import { forwardedHeaders } from '../http/forwarded.js';
import { endToEnd } from '../http/headers.js';
import type { Logger } from '../observability/logger.js';
import type { UpstreamObserver } from '../observability/upstream-metrics.js';

/**
 * T1: everything the shim does not handle itself is streamed to the upstream and back,
 * unbuffered, with method, path, query, headers and body unchanged, `Host` kept and
 * X-Forwarded-For/Proto/Host added, over kept-alive connections.
 *
 * HTTP requests stream through an undici Pool; WebSocket upgrades go through http-proxy-3.
 * Measured on this project's 2-core machine (bench/passthrough-variants.ts), a bare server
 * streaming through undici answered 8,221 req/s against 4,396 through http-proxy-3's web
 * path, with nginx at 13,851: http-proxy-3 stays where it has no equal, the upgrades.
 */
export interface PassThroughOptions {
  target: string;
  /** An upstream silent this long (no headers, or no body bytes) is a 504 / a cut stream. */
  timeoutMs: number;
  maxSockets: number;
  insecureTls: boolean;
  log: Logger;
  /** Metrics hook: told of every proxied request when its headers arrive or it fails. */
  observe?: UpstreamObserver;
}

export interface PassThrough {
  web(req: IncomingMessage, res: ServerResponse): void;
  ws(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  close(): Promise<void>;
}

/** Zulip's long poll: each connected client holds one, ~90 s at a time. */
const LONG_POLL = /^\/(api\/v1|json)\/events(\?|$)/;

export function createPassThrough(o: PassThroughOptions): PassThrough {
  const poolOptions = {
    headersTimeout: o.timeoutMs,
    bodyTimeout: o.timeoutMs,
    keepAliveTimeout: 30_000,
    connect: { rejectUnauthorized: !o.insecureTls },
  };
  const pool = new Pool(o.target, { ...poolOptions, connections: o.maxSockets });
  // Long polls get a pool of their own, one connection per waiting client as without the shim:
  // more waiting clients than maxSockets must never hold the rest of the pass-through back (T1).
  const longPolls = new Pool(o.target, { ...poolOptions, connections: null });

  const secure = o.target.startsWith('https:');
  const agent = secure ? new https.Agent({ keepAlive: true, rejectUnauthorized: !o.insecureTls }) : new http.Agent({ keepAlive: true });
  const wsProxy = createProxyServer({ target: o.target, agent, ws: true, xfwd: false, changeOrigin: false, secure: !o.insecureTls });
  // Without an error handler http-proxy would throw and take the process down (E4).
  wsProxy.on('error', (err, _req, socket) => {
    o.log.warn({ err: { code: (err as NodeJS.ErrnoException).code, message: err.message } }, 'upstream error on a WebSocket upgrade');
    (socket as Duplex).destroy();
  });
  wsProxy.on('econnreset', () => {});

  const observe = (req: IncomingMessage, started: number, outcome: number | 'error' | 'timeout') =>
    o.observe?.(req.url ?? '/', outcome, (performance.now() - started) / 1000);

  const fail = (req: IncomingMessage, res: ServerResponse, err: unknown, started: number) => {
    const timedOut = err instanceof undiciErrors.HeadersTimeoutError || err instanceof undiciErrors.BodyTimeoutError;
    const code = (err as NodeJS.ErrnoException).code ?? (err as { cause?: NodeJS.ErrnoException }).cause?.code ?? 'error';
    if (res.destroyed || (err as Error).name === 'AbortError' || code === 'UND_ERR_ABORTED') return; // the client left
    if (err instanceof undiciErrors.InvalidArgumentError && !res.headersSent) {
      // A request that cannot be sent on as it came (`OPTIONS *`, say) is the client's error,
      // not the upstream's: 400, not 502 (E2).
      const e = badRequest(`This request cannot be passed to the Zulip server: ${(err as Error).message}`);
      const body = errorBody(e.code, e.message);
      res.writeHead(e.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    observe(req, started, timedOut ? 'timeout' : 'error');
    o.log.warn({ err: { code, message: (err as Error).message }, timedOut }, 'upstream error on pass-through');
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const e = timedOut ? upstreamTimeout() : upstreamUnavailable(code);
    const body = errorBody(e.code, e.message);
    res.writeHead(e.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };

  return {
    web(req, res) {
      const started = performance.now();
      const hasBody =
        req.headers['content-length'] !== undefined
          ? req.headers['content-length'] !== '0'
          : req.headers['transfer-encoding'] !== undefined;
      let controller: Dispatcher.DispatchController | undefined;
      let clientGone = false;
      // A client that goes away ends the upstream request too: no socket is left behind.
      res.on('close', () => {
        if (res.writableFinished) return;
        clientGone = true;
        controller?.abort(new Error('client closed the connection'));
      });
      (req.method === 'GET' && LONG_POLL.test(req.url ?? '') ? longPolls : pool).dispatch(
        {
          method: req.method as Dispatcher.HttpMethod,
          path: req.url ?? '/',
          headers: { ...endToEnd(req.headers), ...forwardedHeaders(req) },
          body: hasBody ? req : null,
        },
        {
          onRequestStart(c) {
            controller = c;
            if (clientGone) c.abort(new Error('client closed the connection'));
          },
          onResponseStart(_c, statusCode, headers) {
            if (statusCode < 200) return; // 1xx: Node answers `Expect` itself
            observe(req, started, statusCode);
            res.writeHead(statusCode, endToEnd(headers));
          },
          onResponseData(c, chunk) {
            // Backpressure: a slow client slows the upstream read, nothing piles up here.
            if (!res.write(chunk)) {
              c.pause();
              res.once('drain', () => c.resume());
            }
          },
          onResponseEnd() {
            res.end();
          },
          onResponseError(_c, err) {
            if (!clientGone) fail(req, res, err, started);
          },
        },
      );
    },
    ws(req, socket, head) {
      socket.on('error', () => socket.destroy());
      Object.assign(req.headers, forwardedHeaders(req));
      wsProxy.ws(req, socket, head);
    },
    async close() {
      wsProxy.close();
      agent.destroy();
      await Promise.all([pool.destroy(), longPolls.destroy()]);
    },
  };
}
