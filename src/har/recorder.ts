import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import { createProxyServer } from 'http-proxy-3';
import { loggablePath, type Logger } from '../observability/logger.js';
import { loggableUrl } from '../observability/startup.js';
import { toHarEntry, type Exchange } from './entry.js';
import { Redactor } from './redact.js';
import { HarWriter } from './writer.js';
import { allowLongPolls, listen } from '../http/listen.js';

/**
 * Record mode (H1): a stand-in for the upstream on loopback. The shim sends its upstream
 * traffic here as it would to the upstream; every request is streamed on unchanged (Host
 * kept) and every completed exchange is appended, redacted, to a HAR 1.2 file. The shim
 * keeps one code path: with or without recording it talks to "the upstream".
 *
 * WebSocket upgrades are passed on but not recorded (HAR cannot replay them).
 */

export interface RecorderOptions {
  /** The real upstream URL (as in `--upstream`). */
  upstream: string;
  file: string;
  log: Logger;
  insecureTls?: boolean;
  /** Written as the HAR `log.comment`. */
  comment?: string;
  /** Longest wait before an exchange reaches the file (default 1000 ms). */
  flushMs?: number;
  /** Larger bodies are passed on but left out of the file (default 32 MiB). */
  maxBodyBytes?: number;
}

export interface Recorder {
  /** Where the shim should send upstream traffic. */
  url: string;
  /** Exchanges recorded so far. */
  entries(): number;
  /** Stops listening and writes the file a last time. */
  close(): Promise<void>;
}

/** Collects a body while it streams past, up to a limit. */
class Capture {
  private chunks: Buffer[] = [];
  size = 0;
  constructor(private readonly limit: number) {}
  push(chunk: Buffer): void {
    this.size += chunk.length;
    if (this.size <= this.limit) this.chunks.push(chunk);
    else this.chunks = [];
  }
  body(): Buffer | undefined {
    return this.size <= this.limit ? Buffer.concat(this.chunks, this.size) : undefined;
  }
}

interface InFlight {
  startedAt: number;
  t0: number;
  requestEnd?: number;
  request: Capture;
}

export async function startRecorder(o: RecorderOptions): Promise<Recorder> {
  const upstream = o.upstream.replace(/\/+$/, '');
  const redactor = new Redactor();
  // The HAR names the upstream without any user:password given in --upstream (H1).
  const named = new URL(upstream);
  if (named.password) redactor.placeholder(decodeURIComponent(named.password));
  named.username = '';
  named.password = '';
  const harUpstream = named.toString().replace(/\/+$/, '');
  const limit = o.maxBodyBytes ?? 32 * 1024 * 1024;
  const writer = new HarWriter({ file: o.file, redactor, log: o.log, comment: o.comment, flushMs: o.flushMs });
  // The file exists and is valid from the start; an unwritable path fails here, at start-up.
  await writer.flush();

  const secure = upstream.startsWith('https:');
  const agentOptions = { keepAlive: true, maxSockets: 256, maxFreeSockets: 64, scheduling: 'lifo' as const };
  const agent = secure ? new https.Agent({ ...agentOptions, rejectUnauthorized: !o.insecureTls }) : new http.Agent(agentOptions);
  const proxy = createProxyServer({ target: upstream, agent, xfwd: false, ws: true, changeOrigin: false, secure: !o.insecureTls });
  const inFlight = new WeakMap<IncomingMessage, InFlight>();
  const writes = new Set<Promise<void>>();

  proxy.on('proxyRes', (proxyRes, req) => {
    const f = inFlight.get(req);
    if (!f) return;
    const headersAt = performance.now();
    const response = new Capture(limit);
    proxyRes.on('data', (c: Buffer) => response.push(c));
    // Only complete exchanges are recorded; one the client or upstream cut short is not.
    proxyRes.on('end', () => {
      const end = performance.now();
      const requestEnd = f.requestEnd ?? headersAt;
      const exchange: Exchange = {
        upstream: harUpstream,
        startedAt: f.startedAt,
        method: req.method ?? 'GET',
        url: req.url ?? '/',
        httpVersion: req.httpVersion,
        requestHeaders: req.rawHeaders,
        requestBody: f.request.body(),
        requestSize: f.request.size,
        status: proxyRes.statusCode ?? 0,
        statusText: proxyRes.statusMessage ?? '',
        responseHttpVersion: proxyRes.httpVersion,
        responseHeaders: proxyRes.rawHeaders,
        responseBody: response.body(),
        responseSize: response.size,
        send: requestEnd - f.t0,
        wait: headersAt - requestEnd,
        receive: end - headersAt,
      };
      const w = toHarEntry(exchange, redactor).then(
        (entry) => writer.add(entry, f.startedAt),
        (e: unknown) => o.log.error({ err: { message: (e as Error).message } }, 'could not record an exchange'),
      );
      writes.add(w);
      void w.finally(() => writes.delete(w));
    });
  });

  // An unreachable upstream: the connection is dropped so that the shim answers exactly as it
  // would without the recorder in between (E2).
  proxy.on('error', (err, req, res) => {
    o.log.warn(
      { err: { code: (err as NodeJS.ErrnoException).code ?? 'error' }, path: loggablePath(req.url) },
      'recorder: upstream error; not recorded',
    );
    (res as ServerResponse | Duplex).destroy();
  });
  proxy.on('econnreset', () => {});

  const server = http.createServer((req: IncomingMessage, res: ServerResponse) => {
    const f: InFlight = { startedAt: Date.now(), t0: performance.now(), request: new Capture(limit) };
    inFlight.set(req, f);
    proxy.web(req, res);
    // Listening after proxy.web has piped the request: both see every chunk.
    req.on('data', (c: Buffer) => f.request.push(c));
    req.on('end', () => (f.requestEnd = performance.now()));
  });
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    o.log.debug({ path: loggablePath(req.url) }, 'recorder: WebSocket upgrade passed on, not recorded');
    proxy.ws(req, socket, head);
  });
  // Like the shim, never cut a long poll.
  allowLongPolls(server);
  const { url } = await listen(server, 0, '127.0.0.1');
  o.log.info({ file: o.file, upstream: loggableUrl(upstream) }, 'recording upstream exchanges to a HAR file');

  let closing: Promise<void> | undefined;
  return {
    url,
    entries: () => writer.count,
    close() {
      closing ??= (async () => {
        await new Promise<void>((resolve) => {
          const force = setTimeout(() => server.closeAllConnections(), 5000);
          force.unref();
          server.close(() => {
            clearTimeout(force);
            resolve();
          });
          server.closeIdleConnections();
        });
        await Promise.all([...writes]);
        proxy.close();
        agent.destroy();
        await writer.close();
        o.log.info({ file: o.file, entries: writer.count }, 'HAR recording written');
      })();
      return closing;
    },
  };
}
