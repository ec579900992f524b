import http, { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import express from 'express';
import type { Config } from './config.js';
import type { Handler, ShimContext } from './context.js';
import { errorBody, sendJson, sendShimError, toShimError, ShimError } from './http/errors.js';
import type { Logger } from './observability/logger.js';
import { createMetrics } from './observability/metrics.js';
import { requestLogger } from './observability/request-log.js';
import { upstreamObserver } from './observability/upstream-metrics.js';
import { createPassThrough, type PassThrough } from './proxy/passthrough.js';
import { interceptedHandler } from './routes.js';
import { SnapshotHub, type ClusterSnapshots } from './presence/snapshots.js';
import { clusterSnapshotsFor, createStore } from './store/create.js';
import type { PresenceStore } from './store/types.js';
import { UpstreamClient } from './upstream/client.js';
import { FeatureLevels } from './upstream/feature-level.js';
import { realmOf } from './upstream/realm.js';
import { UserDirectory } from './upstream/user-directory.js';
import { allowLongPolls, listen } from './http/listen.js';

/**
 * A request comes in; one of the intercepted handlers or the shim's own paths takes it
 * (through Express), or the pass-through streams it to the upstream untouched.
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
  clusterSnapshots?: ClusterSnapshots;
  /** Extra readiness checks (store reachable, …); each throws when not ready. */
  readinessChecks?: Array<() => Promise<void>>;
}

export interface Shim {
  server: http.Server;
  context: ShimContext;
  listen(port?: number, host?: string): Promise<{ port: number; url: string }>;
  /** Graceful stop: no new connections, in-flight requests get shutdownGraceMs. */
  close(): Promise<void>;
}

const OWN_PATHS = new Set(['/healthz', '/readyz', '/metrics']);

function pathOf(url: string | undefined): string {
  if (!url) return '/';
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}

/** Statuses for requests Node's parser refuses (as Node itself answers them). */
const CLIENT_ERROR_STATUS: Readonly<Record<string, number>> = {
  HPE_HEADER_OVERFLOW: 431,
  HPE_CHUNK_EXTENSIONS_OVERFLOW: 413,
  ERR_HTTP_REQUEST_TIMEOUT: 408,
};

/** A complete HTTP answer with a shim error in Zulip's shape, for a socket without a response (E2). */
function rawShimError(status: number, msg = `Malformed HTTP request: ${STATUS_CODES[status] ?? 'Bad Request'}`): string {
  const reason = STATUS_CODES[status] ?? 'Bad Request';
  const body = errorBody('BAD_REQUEST', msg);
  return [
    `HTTP/1.1 ${status} ${reason}`,
    'Content-Type: application/json',
    `Content-Length: ${Buffer.byteLength(body)}`,
    'Connection: close',
    '',
    body,
  ].join('\r\n');
}

export function createShim(o: ShimOptions): Shim {
  const { config, log } = o;
  const metrics = createMetrics();
  const observeUpstream = upstreamObserver(metrics);
  const client = new UpstreamClient({
    target: o.target,
    timeoutMs: config.upstream.timeoutMs,
    maxSockets: config.upstream.maxSockets,
    insecureTls: config.upstream.insecureTls,
    maxResponseBytes: config.upstream.maxResponseBytes,
    observe: observeUpstream,
  });
  const featureLevels = new FeatureLevels(client, log, config.featureLevel.ttlMs);
  const store = o.store ?? createStore(config, log, metrics);
  const users = new UserDirectory(client, log, metrics, { ...config.lookups, backend: store.cacheBackend });
  const snapshots = new SnapshotHub(config.presence.coalesceMs, config.presence.maxRealms * 4);
  const context: ShimContext = {
    config,
    log,
    upstreamId: o.upstreamId,
    client,
    featureLevels,
    store,
    snapshots,
    clusterSnapshots: o.clusterSnapshots ?? clusterSnapshotsFor(store),
    metrics,
    users,
  };

  const passThrough: PassThrough = createPassThrough({
    target: o.target,
    timeoutMs: config.upstream.timeoutMs,
    maxSockets: config.upstream.maxSockets,
    insecureTls: config.upstream.insecureTls,
    log,
    observe: observeUpstream,
  });

  const logRequest = requestLogger(log, (path) => OWN_PATHS.has(path));

  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.get('/healthz', (_req, res) => sendJson(res, 200, { result: 'success', msg: '', status: 'alive' }));
  app.get('/readyz', async (req, res) => {
    try {
      await featureLevels.info(realmOf(o.upstreamId, req.headers));
      await store.ping();
      for (const check of o.readinessChecks ?? []) await check();
      sendJson(res, 200, { result: 'success', msg: '', status: 'ready' });
    } catch (e) {
      sendJson(res, 503, { result: 'error', msg: `not ready: ${(e as Error).message}`, code: 'NOT_READY' });
    }
  });
  app.get('/metrics', async (_req, res) => {
    const text = await metrics.registry.metrics();
    res.writeHead(200, { 'content-type': metrics.registry.contentType });
    res.end(text);
  });
  const wrap = (h: Handler) => async (req: IncomingMessage, res: ServerResponse) => {
    try {
      await h(req, res, context);
    } catch (e) {
      const err = toShimError(e);
      if (!(e instanceof ShimError)) log.error({ err: e }, 'unexpected error in handler');
      // After a 413 the rest of the body is never read: close the connection (E2).
      sendShimError(res, err, err.status === 413 ? { connection: 'close' } : {});
    }
  };
  // Only the shim's own paths get here unmatched (another method): a Zulip-shaped 405 (E2).
  app.use((_req: express.Request, res: express.Response) => {
    sendJson(res, 405, errorBody('BAD_REQUEST', 'Method Not Allowed'), { allow: 'GET, HEAD' });
  });
  // What Express catches itself (a failed /metrics, say) answers in Zulip's shape too (E4).
  const expressFault: express.ErrorRequestHandler = (e, _req, res, _next) => {
    log.error({ err: e }, 'unexpected error in a shim path');
    sendShimError(res, toShimError(e));
  };
  app.use(expressFault);

  const server = http.createServer((req, res) => {
    try {
      const path = pathOf(req.url);
      logRequest(req, res, path);
      const handler = interceptedHandler(req.method, path);
      if (handler) {
        void wrap(handler)(req, res);
      } else if (OWN_PATHS.has(path)) {
        app(req, res);
      } else {
        passThrough.web(req, res);
      }
    } catch (e) {
      // E4: a fault on the way in costs this request a 500, never the process.
      log.error({ err: e }, 'unexpected error routing a request');
      sendShimError(res, toShimError(e));
    }
  });
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => passThrough.ws(req, socket, head));
  server.on('clientError', (err, socket) => {
    const code = (err as NodeJS.ErrnoException).code;
    // Node's own rule: answer only where no answer to an earlier request is being written.
    const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (code !== 'ECONNRESET' && socket.writable && !inFlight?.headersSent)
      socket.end(rawShimError(CLIENT_ERROR_STATUS[code ?? ''] ?? 400));
    else socket.destroy();
    log.debug({ err: { code } }, 'client error');
  });
  // No tunnels through the shim (E4: an answer all the same, not a dropped connection).
  server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => socket.destroy());
    socket.end(rawShimError(405, 'CONNECT is not supported'));
  });
  // Long polls (GET /events, ~90 s) must never be cut by the shim's own server timeouts.
  allowLongPolls(server);

  let closing: Promise<void> | undefined;
  return {
    server,
    context,
    listen(port = config.server.port, host = config.server.host) {
      return listen(server, port, host);
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        const timer = setTimeout(() => server.closeAllConnections(), config.server.shutdownGraceMs);
        timer.unref();
        // A kept-alive connection goes idle when its in-flight request ends: close it then,
        // rather than holding shutdown for the whole grace period.
        const sweep = setInterval(() => server.closeIdleConnections(), 100);
        sweep.unref();
        server.close(() => {
          clearTimeout(timer);
          clearInterval(sweep);
          resolve();
        });
        server.closeIdleConnections();
      }).then(async () => {
        await passThrough.close();
        await client.destroy();
        if (!o.store) await store.close(); // a store passed in belongs to the caller
      });
      return closing;
    },
  };
}

export { pathOf };
