import http, { type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';
import { serveParent } from './children.js';

/**
 * B4's "bare undici pass-through": what a Node proxy on undici reaches with nothing else to do.
 * A node:http server hands every request to one undici Pool (as many connections as the shim's
 * pass-through pool, kept alive) and streams both ways: the request body into the upstream
 * request, the upstream's answer into the client's response. Hop-by-hop headers are dropped
 * both ways; no X-Forwarded-*, no request log, no metrics, no timeouts beyond undici's own. The
 * shim's pass-through is measured against it in the same run (bench/b4.ts).
 *
 *   node bench/bare-passthrough.js UPSTREAM_URL      (a child of the bench: serveParent)
 */

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade', 'proxy-connection']);

function endToEnd(h: IncomingHttpHeaders | Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
  return out;
}

/** The request listener of the bare pass-through to `upstream`, and how to close its pool. */
export function bareUndiciPassThrough(upstream: string): { handler: http.RequestListener; close(): Promise<void> } {
  const pool = new Pool(upstream, { connections: 256, keepAliveTimeout: 30_000 });
  const handler: http.RequestListener = (req, res) => {
    const body = req.method === 'GET' || req.method === 'HEAD' ? null : req;
    pool.stream(
      { method: req.method as 'GET', path: req.url ?? '/', headers: endToEnd(req.headers), body },
      ({ statusCode, headers }) => {
        res.writeHead(statusCode, endToEnd(headers));
        return res;
      },
      (err) => {
        if (!err) return;
        if (!res.headersSent) res.writeHead(502).end();
        else res.destroy();
      },
    );
  };
  return { handler, close: () => pool.close() };
}

/**
 * The shim's own pass-through (src/proxy/passthrough.ts) with nothing else around it: each
 * request handed to it as a path the route table does not name, on the shim's default upstream
 * timeout and pool size; `observe`: the upstream metrics hook. The bench's second reference,
 * beside the bare undici one: what the shim adds before its pass-through and what the
 * pass-through adds to undici.
 */
export async function shimPassThroughAlone(
  upstream: string,
  o: { logLevel: string; observe?: boolean },
): Promise<{ handler: http.RequestListener; close(): Promise<void> }> {
  const { loadConfig } = await import('../src/config/index.js');
  const { createLogger } = await import('../src/observability/logger.js');
  const { abortWithClient, createPassThrough } = await import('../src/proxy/passthrough.js');
  const { NOT_IN_TABLE } = await import('../src/http/api-routes.js');
  const { createMetrics } = await import('../src/observability/metrics.js');
  const { upstreamObserver } = await import('../src/observability/upstream-metrics.js');
  const { createTransport } = await import('../src/upstream/transport.js');
  const { timeoutMs, maxSockets } = loadConfig(['--upstream', upstream], {}).config.upstream;
  const observe = o.observe ? upstreamObserver(createMetrics()) : undefined;
  const transport = createTransport({ target: upstream, timeoutMs, maxSockets, insecureTls: false, observe });
  const proxy = createPassThrough({ target: upstream, transport, insecureTls: false, log: createLogger(o.logLevel) });
  return {
    handler: (req, res) => abortWithClient(proxy.web(req, res, 'bench', NOT_IN_TABLE)),
    async close() {
      await proxy.close();
      await transport.close();
    },
  };
}

const isMain = process.argv[1] !== undefined && /bare-passthrough\.[jt]s$/.test(process.argv[1]);
if (isMain) {
  const upstream = process.argv[2];
  if (!upstream) throw new Error('usage: bare-passthrough UPSTREAM_URL');
  const { handler, close } = bareUndiciPassThrough(upstream);
  const server = http.createServer(handler);
  server.keepAliveTimeout = 65_000;
  server.listen(0, '127.0.0.1', () => {
    serveParent(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, {}, async () => {
      server.closeAllConnections();
      server.close();
      await close();
    });
  });
}
