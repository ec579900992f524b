import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import { createProxyServer } from 'http-proxy-3';
import { errorBody, upstreamTimeout, upstreamUnavailable } from '../http/errors.js';
import { forwardedHeaders } from '../http/forwarded.js';
import type { Logger } from '../observability/logger.js';
import type { UpstreamObserver } from '../observability/upstream-metrics.js';

/**
 * T1: everything the shim does not handle itself is streamed to the upstream and back,
 * unbuffered, with method, path, query, headers and body unchanged, `Host` kept and
 * X-Forwarded-For/Proto/Host added. WebSocket upgrades too.
 */
export interface PassThroughOptions {
  target: string;
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
  close(): void;
}

const TIMED_OUT = Symbol('upstream timed out');
/** When the request was handed to the proxy; cleared once it has been counted. */
const STARTED = Symbol('pass-through started');
type Tracked = IncomingMessage & { [TIMED_OUT]?: boolean; [STARTED]?: number };

export function createPassThrough(o: PassThroughOptions): PassThrough {
  const secure = o.target.startsWith('https:');
  const agentOptions = { keepAlive: true, maxSockets: o.maxSockets, maxFreeSockets: 64, scheduling: 'lifo' as const };
  const agent = secure
    ? new https.Agent({ ...agentOptions, rejectUnauthorized: !o.insecureTls })
    : new http.Agent(agentOptions);

  const proxy = createProxyServer({
    target: o.target,
    agent,
    // X-Forwarded-* are set below by the shim's one rule (src/http/forwarded.ts).
    xfwd: false,
    ws: true,
    changeOrigin: false,
    secure: !o.insecureTls,
  });

  // An idle upstream socket (no bytes either way) for longer than the timeout is a 504. The
  // timer is per socket activity, so a long poll that answers within it, or a download
  // that keeps flowing, is never cut.
  proxy.on('proxyReq', (proxyReq, req) => {
    proxyReq.setTimeout(o.timeoutMs, () => {
      (req as IncomingMessage & { [TIMED_OUT]?: boolean })[TIMED_OUT] = true;
      proxyReq.destroy();
    });
  });

  // Metrics: one count per request, at its response headers or at its failure below.
  const observed = (req: Tracked, outcome: number | 'error' | 'timeout') => {
    const started = req[STARTED];
    if (started === undefined || !o.observe) return;
    req[STARTED] = undefined;
    o.observe(req.url ?? '/', outcome, (performance.now() - started) / 1000);
  };
  proxy.on('proxyRes', (proxyRes, req) => observed(req as Tracked, proxyRes.statusCode ?? 0));

  // Without this handler http-proxy would throw and take the process down (E4).
  proxy.on('error', (err, req, res) => {
    const timedOut = (req as Tracked)[TIMED_OUT] === true;
    observed(req as Tracked, timedOut ? 'timeout' : 'error');
    const code = (err as NodeJS.ErrnoException).code ?? 'error';
    o.log.warn({ err: { code, message: err.message }, timedOut }, 'upstream error on pass-through');
    if (!(res instanceof (http.ServerResponse as unknown as typeof ServerResponse))) {
      (res as Duplex).destroy();
      return;
    }
    if (res.headersSent || res.destroyed) {
      res.destroy();
      return;
    }
    const e = timedOut ? upstreamTimeout() : upstreamUnavailable(code);
    const body = errorBody(e.code, e.message);
    res.writeHead(e.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });

  // A client that goes away mid-request is normal; http-proxy-3 destroys the upstream request.
  proxy.on('econnreset', () => {});

  return {
    web: (req, res) => {
      if (o.observe) (req as Tracked)[STARTED] = performance.now();
      Object.assign(req.headers, forwardedHeaders(req));
      proxy.web(req, res);
    },
    ws: (req, socket, head) => {
      socket.on('error', () => socket.destroy());
      Object.assign(req.headers, forwardedHeaders(req));
      proxy.ws(req, socket, head);
    },
    close: () => {
      proxy.close();
      agent.destroy();
    },
  };
}
