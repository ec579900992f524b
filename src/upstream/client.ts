import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import { Pool, errors as undiciErrors } from 'undici';
import { ShimError, upstreamBadResponse, upstreamTimeout, upstreamUnavailable } from '../http/errors.js';
import type { UpstreamObserver } from '../observability/upstream-metrics.js';
import { forwardedHeaders as xForwarded } from '../http/forwarded.js';
import { endToEnd } from '../http/headers.js';
import type { Realm } from './realm.js';

/**
 * The one HTTP client for the shim's own calls to the upstream (intercepted endpoints,
 * version detection, lookups). Kept-alive connections; the pass-through uses its own agent.
 */

export interface UpstreamCall {
  realm: Realm;
  method: 'GET' | 'POST' | 'DELETE' | 'PATCH';
  /** Path and query, e.g. `/api/v1/users/me/presence`. */
  path: string;
  /** End-to-end headers to send (see forwardedHeaders); `host` selects the realm. */
  headers: Record<string, string>;
  body?: string | Buffer;
}

export interface UpstreamResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Readable;
}

export interface BufferedResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface UpstreamClientOptions {
  /** Where requests go: the upstream itself, or the recorder/replayer standing in for it. */
  target: string;
  timeoutMs: number;
  maxSockets: number;
  insecureTls: boolean;
  maxResponseBytes: number;
  /** Metrics hook: told of every call when its headers arrive or it fails. */
  observe?: UpstreamObserver;
}

export class UpstreamClient {
  private readonly pool: Pool;
  readonly maxResponseBytes: number;

  constructor(readonly options: UpstreamClientOptions) {
    this.pool = new Pool(options.target, {
      connections: options.maxSockets,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
      keepAliveTimeout: 30_000,
      connect: { rejectUnauthorized: !options.insecureTls },
    });
    this.maxResponseBytes = options.maxResponseBytes;
  }

  /** Sends a request; the body is left for the caller to stream or read. */
  async request(call: UpstreamCall): Promise<UpstreamResponse> {
    const started = performance.now();
    const observe = this.options.observe;
    try {
      const r = await this.pool.request({
        method: call.method,
        path: call.path,
        headers: { ...call.headers, host: call.realm.host || new URL(this.options.target).host },
        body: call.body,
      });
      observe?.(call.path, r.statusCode, (performance.now() - started) / 1000);
      return { status: r.statusCode, headers: r.headers as IncomingHttpHeaders, body: r.body };
    } catch (e) {
      const err = translate(e);
      const timedOut = err instanceof ShimError && err.code === 'UPSTREAM_TIMEOUT';
      observe?.(call.path, timedOut ? 'timeout' : 'error', (performance.now() - started) / 1000);
      throw err;
    }
  }

  /** Sends a request and reads the whole body, bounded by maxResponseBytes. */
  async fetch(call: UpstreamCall): Promise<BufferedResponse> {
    const r = await this.request(call);
    return { status: r.status, headers: r.headers, body: await readAll(r.body, this.maxResponseBytes) };
  }

  close(): Promise<void> {
    return this.pool.close();
  }

  destroy(): Promise<void> {
    return this.pool.destroy();
  }
}

/** An upstream transport failure as the shim's own error (E2): timed out, unreachable, too large. */
export function translate(e: unknown): Error {
  if (e instanceof undiciErrors.HeadersTimeoutError || e instanceof undiciErrors.BodyTimeoutError) {
    return upstreamTimeout();
  }
  if (e instanceof undiciErrors.ResponseExceededMaxSizeError) return upstreamBadResponse('body too large');
  const err = e as NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException };
  const code = err.code ?? err.cause?.code ?? 'error';
  return upstreamUnavailable(code);
}

/** Reads a body to the end, failing with UPSTREAM_BAD_RESPONSE past `limit` bytes. */
export async function readAll(body: Readable, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      size += (chunk as Buffer).length;
      if (size > limit) {
        body.destroy();
        throw upstreamBadResponse(`body larger than ${limit} bytes`);
      }
      chunks.push(chunk as Buffer);
    }
  } catch (e) {
    if (e instanceof Error && e.name === 'ShimError') throw e;
    throw translate(e);
  }
  return Buffer.concat(chunks, size);
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
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(endToEnd(req.headers, OWN_CALL_DROPS))) out[k] = Array.isArray(v) ? v.join(', ') : v;
  Object.assign(out, xForwarded(req));
  out['accept-encoding'] = 'identity';
  return out;
}
