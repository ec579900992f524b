import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { type Duplex, Transform } from 'node:stream';
import type { Dispatcher } from 'undici';
import { abortWithClient, dropHopByHop, PassThroughExchange, pipeBody } from '../proxy/passthrough.js';
import { webSocketForwarder } from '../proxy/websocket.js';
import { createTransport, isClientAbort } from '../upstream/transport.js';
import { loggablePath, type Logger } from '../observability/logger.js';
import { loggableUrl } from '../observability/startup.js';
import { toHarEntry, type ExchangeRecord } from './entry.js';
import { Redactor } from './redact.js';
import { HarWriter } from './writer.js';
import { allowLongPolls, listen } from '../http/listen.js';

/**
 * Record mode (H1): a stand-in for the upstream on loopback. The shim sends its upstream
 * traffic here as it would to the upstream; every request is streamed on unchanged (Host
 * kept) through the shim's upstream transport, and every completed exchange is appended,
 * redacted, to a HAR 1.2 file as it completes (X8: nothing kept in memory). The shim keeps
 * one code path: with or without recording it talks to "the upstream".
 *
 * WebSocket upgrades are passed on but not recorded (HAR cannot replay them).
 */

interface RecorderOptions {
  /** The real upstream URL (as in `--upstream`). */
  upstream: string;
  file: string;
  log: Logger;
  insecureTls?: boolean;
  /** Written as the HAR `log.comment`. */
  comment?: string;
  /** Longest wait before an exchange reaches the file (HAR_FLUSH_MS but in tests). */
  flushMs: number;
}

/** Larger bodies are passed on but left out of the file. */
const RECORDED_BODY_MAX_BYTES = 32 * 1024 * 1024;

interface Recorder {
  /** Where the shim should send upstream traffic. */
  url: string;
  /** Exchanges recorded so far. */
  entries(): number;
  /** Stops listening and writes the file a last time. */
  close(): Promise<void>;
}

/**
 * Collects a body while it streams past, up to a limit. With its length known beforehand
 * (Content-Length) each chunk is copied into one buffer as it passes and let go, so a body is
 * held once, not as its chunks and then their concatenation (X8).
 */
class Capture {
  private chunks: Buffer[] = [];
  private whole: Buffer | undefined;
  size = 0;
  constructor(private readonly limit: number) {}
  /** The body's announced length: one buffer of that size is filled as chunks pass. */
  expect(length: number): void {
    if (this.size === 0 && length > 0 && length <= this.limit) this.whole = Buffer.allocUnsafe(length);
  }
  push(chunk: Buffer): void {
    const at = this.size;
    this.size += chunk.length;
    if (this.whole && this.size <= this.whole.length) chunk.copy(this.whole, at);
    else if (this.whole) this.spill(at);
    if (this.whole) return;
    if (this.size <= this.limit) this.chunks.push(chunk);
    else this.chunks = [];
  }
  /** More bytes than announced: back to chunks, with what was copied so far. */
  private spill(copied: number): void {
    this.chunks = [this.whole!.subarray(0, copied)];
    this.whole = undefined;
  }
  body(): Buffer | undefined {
    if (this.size > this.limit) return undefined;
    if (this.whole) return this.whole.subarray(0, this.size);
    return Buffer.concat(this.chunks, this.size);
  }
}

/** Header values as Node's raw list (name, value, …), from undici's raw list or its parsed headers. */
function rawList(raw: Dispatcher.DispatchController['rawHeaders'], parsed: IncomingHttpHeaders): string[] {
  if (Array.isArray(raw)) return raw.map((v) => (typeof v === 'string' ? v : Buffer.from(v).toString('latin1')));
  const out: string[] = [];
  for (const [k, v] of Object.entries(parsed)) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) out.push(k, one);
  }
  return out;
}

/**
 * One exchange on its way to the upstream through the shim's transport, recorded when it
 * completes. Built from the pass-through's own passes (no X-Forwarded-* of its own: the shim
 * in front has added them). Only complete exchanges are recorded; one the client or the
 * upstream cut short is not, and a failure drops the connection so that the shim answers
 * exactly as it would without the recorder in between (E2).
 */
class RecordingExchange extends PassThroughExchange {
  private readonly startedAt = Date.now();
  private readonly t0 = performance.now();
  private requestEnd: number | undefined;
  private headersAt = 0;
  private readonly request: Capture;
  private readonly response: Capture;
  private status = 0;
  private statusText = '';
  private responseHeaders: string[] = [];

  constructor(
    req: IncomingMessage,
    res: ServerResponse,
    private readonly r: RecorderContext,
  ) {
    super(req, res, r.log);
    this.request = new Capture(r.limit);
    this.response = new Capture(r.limit);
  }

  /** The request body goes upstream through a tap that keeps a copy (up to the limit). */
  tapRequest(): void {
    if (!this.options.body) return;
    const request = this.request;
    const length = Number(this.req.headers['content-length']);
    if (Number.isSafeInteger(length)) request.expect(length);
    const tap = new Transform({
      transform(chunk: Buffer, _enc, done) {
        request.push(chunk);
        done(null, chunk);
      },
    });
    tap.on('end', () => (this.requestEnd = performance.now()));
    // A client that goes away mid-body ends the upstream request too.
    this.req.on('error', (e) => tap.destroy(e));
    this.options.body = this.req.pipe(tap);
  }

  override onResponseStart(c: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders, message?: string): void {
    if (statusCode >= 200) {
      this.headersAt = performance.now();
      this.status = statusCode;
      this.statusText = message ?? '';
      this.responseHeaders = rawList(c.rawHeaders, headers);
      const length = Number(headers['content-length']);
      if (Number.isSafeInteger(length)) this.response.expect(length);
    }
    super.onResponseStart(c, statusCode, headers);
  }

  override onResponseData(c: Dispatcher.DispatchController, chunk: Buffer): void {
    this.response.push(chunk);
    super.onResponseData(c, chunk);
  }

  override onResponseEnd(): void {
    super.onResponseEnd();
    const end = performance.now();
    const requestEnd = this.requestEnd ?? this.headersAt;
    const req = this.req;
    this.r.record({
      upstream: this.r.harUpstream,
      startedAt: this.startedAt,
      method: req.method ?? 'GET',
      url: req.url ?? '/',
      httpVersion: req.httpVersion,
      requestHeaders: req.rawHeaders,
      requestBody: this.request.body(),
      requestSize: this.request.size,
      status: this.status,
      statusText: this.statusText,
      responseHttpVersion: '1.1',
      responseHeaders: this.responseHeaders,
      responseBody: this.response.body(),
      responseSize: this.response.size,
      send: requestEnd - this.t0,
      wait: this.headersAt - requestEnd,
      receive: end - this.headersAt,
    });
  }

  override onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    if (!this.clientGone && !isClientAbort(err)) {
      this.r.log.warn({ err, path: loggablePath(this.req.url) }, 'recorder: upstream error; not recorded');
    }
    this.res.destroy();
  }
}

interface RecorderContext {
  harUpstream: string;
  limit: number;
  log: Logger;
  record(exchange: ExchangeRecord): void;
}

/** The recorder's passes: the request as the shim sent it, streamed on. */
const RECORDER_INCOMING = [dropHopByHop, pipeBody, abortWithClient] as const;

/** H1: the upstream as the HAR names it, without any user:password given in --upstream (the password a placeholder from now on). */
function harUpstreamOf(upstream: string, redactor: Redactor): string {
  const named = new URL(upstream);
  if (named.password) redactor.placeholder(decodeURIComponent(named.password));
  named.username = '';
  named.password = '';
  return named.toString().replace(/\/+$/, '');
}

/** What every recorded exchange shares: where it is written, and the writes still under way (awaited at close). */
function recorderContext(o: RecorderOptions, harUpstream: string, redactor: Redactor, writer: HarWriter, writes: Set<Promise<void>>) {
  const context: RecorderContext = {
    harUpstream,
    limit: RECORDED_BODY_MAX_BYTES,
    log: o.log,
    record(exchange) {
      const w = toHarEntry(exchange, redactor).then(
        ({ entry, responseText }) => writer.add(entry, exchange.startedAt, responseText),
        (e: unknown) => o.log.error({ err: e }, 'could not record an exchange'),
      );
      writes.add(w);
      void w.finally(() => writes.delete(w));
    },
  };
  return context;
}

/** The listener closed (its connections cut after 5 s at most). */
function closeServer(server: http.Server): Promise<void> {
  return new Promise<void>((resolve) => {
    const force = setTimeout(() => server.closeAllConnections(), 5000);
    force.unref();
    server.close(() => {
      clearTimeout(force);
      resolve();
    });
    server.closeIdleConnections();
  });
}

export async function startRecorder(o: RecorderOptions): Promise<Recorder> {
  const upstream = o.upstream.replace(/\/+$/, '');
  const redactor = new Redactor();
  const harUpstream = harUpstreamOf(upstream, redactor);
  const writer = new HarWriter({ file: o.file, redactor, log: o.log, comment: o.comment, flushMs: o.flushMs });
  // The file exists and is valid from the start; an unwritable path fails here, at start-up.
  await writer.flush();

  // The shim in front keeps the deadlines (timeout 0: none here); X5 retries happen here too.
  const transport = createTransport({ target: upstream, timeoutMs: 0, maxSockets: 256, insecureTls: o.insecureTls ?? false });
  const upgrades = webSocketForwarder({
    target: upstream,
    insecureTls: o.insecureTls ?? false,
    log: o.log,
    failure: 'recorder: upstream error on a WebSocket upgrade',
  });
  const writes = new Set<Promise<void>>();
  const context = recorderContext(o, harUpstream, redactor, writer, writes);
  const server = http.createServer((req: IncomingMessage, res: ServerResponse) => {
    const exchange = new RecordingExchange(req, res, context);
    for (const pass of RECORDER_INCOMING) pass(exchange);
    exchange.tapRequest();
    transport.dispatch(exchange.options, exchange);
  });
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    o.log.debug({ path: loggablePath(req.url) }, 'recorder: WebSocket upgrade passed on, not recorded');
    upgrades.ws(req, socket, head);
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
        await closeServer(server);
        await Promise.all([...writes]);
        await upgrades.close();
        await transport.close();
        await writer.close();
        o.log.info({ file: o.file, entries: writer.count }, 'HAR recording written');
      })();
      return closing;
    },
  };
}
