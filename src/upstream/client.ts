import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import { readUpTo } from '../http/body.js';
import { upstreamBadResponse, UpstreamAnswerTooLargeError } from '../http/errors.js';
import type { UpstreamObserver } from '../observability/upstream-metrics.js';
import { setXForwarded } from '../http/forwarded.js';
import { contentLengthOf, copyEndToEnd } from '../http/headers.js';
import type { Realm } from './realm.js';
import { createTransport, translate, type Transport, type UpstreamDispatchOptions } from './transport.js';

/**
 * The one HTTP client for the shim's own calls to the upstream (intercepted endpoints,
 * version detection, lookups), over the shim's one upstream transport (transport.ts).
 */

export interface UpstreamCall {
  realm: Realm;
  method: 'GET' | 'POST' | 'DELETE' | 'PATCH';
  /** Path and query, e.g. `/api/v1/users/me/presence`. */
  path: string;
  /** End-to-end headers to send (see forwardedHeaders); `host` selects the realm. */
  headers: Record<string, string>;
  body?: string | Buffer;
  /** Ends the call (its upstream request aborted) when it fires: the client went away. */
  signal?: AbortSignal;
}

export interface UpstreamResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Readable;
}

/** An upstream answer's status and headers, all an answer the shim builds itself takes from it. */
export interface UpstreamHead {
  status: number;
  headers: IncomingHttpHeaders;
}

export interface BufferedResponse extends UpstreamHead {
  body: Buffer;
}

/** An answer of `open`: under its total deadline (X3), read whole or up to a limit. */
export interface OpenedResponse extends UpstreamResponse {
  /** The whole body, failing with UPSTREAM_BAD_RESPONSE past `maxBytes` (default upstream.maxResponseBytes). */
  read(maxBytes?: number): Promise<Buffer>;
  /** Up to `maxBytes`: all of it (`whole`), or what was read and the rest of the stream. */
  readUpTo(maxBytes?: number): ReturnType<typeof readUpTo>;
}

/**
 * An answer whose head has arrived while its body is still being read (B7: a caller can act on
 * the status before a large body is in). The body is read as `fetch` reads it: bounded, within
 * the same total deadline (X3); its promise is the caller's to await or to catch.
 */
export interface ArrivingResponse extends UpstreamHead {
  body: Promise<Buffer>;
}

export interface UpstreamClientOptions {
  /** Where requests go: the upstream itself, or the recorder/replayer standing in for it. */
  target: string;
  /** Silence timeout of a streamed answer; total deadline of a buffered one (X3). */
  timeoutMs: number;
  maxSockets: number;
  insecureTls: boolean;
  maxResponseBytes: number;
  /** Metrics hook: told of every call when its headers arrive or it fails. */
  observe?: UpstreamObserver;
  /** The shim's one upstream transport; without it the client makes (and owns) its own. */
  transport?: Transport;
}

export class UpstreamClient {
  private readonly transport: Transport;
  private readonly ownsTransport: boolean;
  private readonly targetHost: string;
  readonly maxResponseBytes: number;

  constructor(readonly options: UpstreamClientOptions) {
    this.ownsTransport = !options.transport;
    this.transport = options.transport ?? createTransport(options);
    this.targetHost = new URL(options.target).host;
    this.maxResponseBytes = options.maxResponseBytes;
  }

  /**
   * Sends a request whose answer is passed on as it streams (T1): no total deadline, only the
   * upstream's silence timeout; there is no way to read it whole here (X3).
   */
  async stream(call: UpstreamCall): Promise<UpstreamResponse> {
    return this.dispatch(call, undefined);
  }

  /**
   * Sends a request whose answer the shim may read whole (`read`, or `readUpTo` to pass on what
   * is too large): the exchange ends within `upstream.timeoutMs` from its start to its last byte
   * however slowly the answer drips (X3); past it, the body fails with UPSTREAM_TIMEOUT.
   */
  async open(call: UpstreamCall): Promise<OpenedResponse> {
    const r = await this.dispatch(call, this.options.timeoutMs);
    return {
      ...r,
      read: (maxBytes = this.maxResponseBytes) => readAll(r.body, maxBytes, contentLengthOf(r.headers)),
      readUpTo: async (maxBytes = this.maxResponseBytes) => {
        try {
          return await readUpTo(r.body, maxBytes, contentLengthOf(r.headers));
        } catch (e) {
          throw translate(e);
        }
      },
    };
  }

  /**
   * Sends a request and reads the whole body, bounded by maxResponseBytes, within the total
   * deadline (`open`): callers waiting on this promise (a single-flight fetch) are released at
   * that deadline too. Past `maxBytes` it fails with UpstreamAnswerTooLargeError.
   */
  async fetch(call: UpstreamCall, maxBytes = this.maxResponseBytes): Promise<BufferedResponse> {
    const r = await this.fetchHeadFirst(call, maxBytes);
    return { status: r.status, headers: r.headers, body: await r.body };
  }

  /** `fetch`, resolved as soon as the head arrived; the body goes on being read meanwhile. */
  async fetchHeadFirst(call: UpstreamCall, maxBytes = this.maxResponseBytes): Promise<ArrivingResponse> {
    const r = await this.open(call);
    return { status: r.status, headers: r.headers, body: r.read(maxBytes) };
  }

  private async dispatch(call: UpstreamCall, deadlineMs: number | undefined): Promise<UpstreamResponse> {
    const r = await this.transport.dispatcher.request({
      method: call.method,
      path: call.path,
      headers: { ...call.headers, host: call.realm.host || this.targetHost },
      body: call.body ?? null,
      ...(call.signal ? { signal: call.signal } : {}),
      ...(deadlineMs === undefined ? {} : { deadlineMs }),
    } as UpstreamDispatchOptions);
    return { status: r.statusCode, headers: r.headers as IncomingHttpHeaders, body: r.body };
  }

  /** Closes the transport if this client made it (the shim closes the shared one itself). */
  destroy(): Promise<void> {
    return this.ownsTransport ? this.transport.close() : Promise.resolve();
  }
}

export { translate };

/** An upstream answer's Content-Length (undefined when absent or not a number). Only the upstream's is trusted this far. */
/** Reads an upstream body to the end, failing with UPSTREAM_BAD_RESPONSE past `limit` bytes. */
async function readAll(body: Readable, limit: number, expectedBytes?: number): Promise<Buffer> {
  let read: Awaited<ReturnType<typeof readUpTo>>;
  try {
    read = await readUpTo(body, limit, expectedBytes);
  } catch (e) {
    throw translate(e);
  }
  if (!read.whole) {
    read.rest.destroy();
    throw new UpstreamAnswerTooLargeError(read.size, limit);
  }
  return read.body;
}

/** Parses a 2xx JSON body of an intercepted endpoint; anything else is E2's bad response. */
export function parseJsonObject(body: Buffer): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch {
    throw upstreamBadResponse('body is not JSON');
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw upstreamBadResponse('body is not a JSON object');
  return v as Record<string, unknown>;
}

/** Not sent on the shim's own calls: the shim sets the target host and re-encodes the body. */
const OWN_CALL_DROPS: ReadonlySet<string> = new Set(['host', 'content-length', 'content-type', 'accept-encoding']);

/**
 * The client's end-to-end headers for a call the shim makes on its behalf (authorization,
 * cookie, user-agent, which Zulip uses to name the client in presence, …), plus
 * X-Forwarded-For/Proto/Host as the pass-through adds them (T1). The body is re-encoded by the
 * shim, so content headers are left out; `identity` keeps bodies parseable.
 */
export function forwardedHeaders(req: IncomingMessage): Record<string, string> {
  const out = copyEndToEnd(req.headers, {}, OWN_CALL_DROPS);
  for (const k in out) {
    const v = out[k];
    if (Array.isArray(v)) out[k] = v.join(', ');
  }
  setXForwarded(req, out);
  out['accept-encoding'] = 'identity';
  return out as Record<string, string>;
}
