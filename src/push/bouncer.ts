import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { ShimError, UpstreamTimeoutError } from '../http/errors.js';
import { copyEndToEnd, declaresBody } from '../http/headers.js';
import { createTransport, isClientAbort, translate, type Transport, type UpstreamDispatchOptions } from '../upstream/transport.js';

/**
 * M7: the push bouncer, as the relay talks to it: over a transport of its own built from the
 * shim's one upstream transport (undici, its deadline, X5 retry of safe requests and error
 * translation), aimed at the bouncer's origin. A request goes on as the server sent it: method,
 * path, query, end-to-end headers (its credentials among them) and body; only `Host` names the
 * bouncer, as the server would have named it. Nothing is added (no `X-Forwarded-*`: the bouncer
 * is a service of someone else's).
 */

export interface BouncerOptions {
  /** The bouncer's origin (push.bouncerUrl). */
  url: string;
  /** Silence timeout of an answer (upstream.timeoutMs). */
  timeoutMs: number;
}

/** Connections kept to the bouncer: one server's notifications, one request at a time each. */
const BOUNCER_SOCKETS = 16;

export interface BouncerAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Readable;
}

export class Bouncer {
  private readonly transport: Transport;
  private readonly host: string;

  constructor(readonly options: BouncerOptions) {
    this.host = new URL(options.url).host;
    // TLS to the bouncer is always verified: it is reached over the internet with the server's key.
    this.transport = createTransport({
      target: options.url,
      timeoutMs: options.timeoutMs,
      maxSockets: BOUNCER_SOCKETS,
      insecureTls: false,
    });
  }

  /**
   * Sends the server's request on: `body` in place of the request's own when the relay changed
   * it (its Content-Length then the new one), else the request's body streamed as it comes.
   */
  async send(req: IncomingMessage, body?: Buffer | Readable): Promise<BouncerAnswer> {
    const headers = copyEndToEnd(req.headers, {});
    headers.host = this.host;
    if (Buffer.isBuffer(body)) headers['content-length'] = String(body.length);
    try {
      const r = await this.transport.dispatcher.request({
        method: req.method as Dispatcher.HttpMethod,
        path: req.url ?? '/',
        headers,
        body: body ?? (declaresBody(req.headers) ? req : null),
        passThrough: true,
      } as UpstreamDispatchOptions);
      return { status: r.statusCode, headers: r.headers as IncomingHttpHeaders, body: r.body };
    } catch (e) {
      throw isClientAbort(e) ? e : bouncerFailure(e);
    }
  }

  close(): Promise<void> {
    return this.transport.close();
  }
}

/** The relay's own answer when the bouncer gave none (E2, in the bouncer's words, not the Zulip server's). */
export class BouncerUnavailableError extends ShimError {
  constructor(detail: string) {
    super(502, 'UPSTREAM_UNAVAILABLE', `The push notification bouncer could not be reached: ${detail}`);
  }
}

export class BouncerTimeoutError extends ShimError {
  constructor() {
    super(504, 'UPSTREAM_TIMEOUT', 'The push notification bouncer did not answer in time');
  }
}

/** A transport failure as the relay's error; its detail is an error code, never a header or a body. */
export function bouncerFailure(e: unknown): ShimError {
  const err = translate(e);
  if (err instanceof UpstreamTimeoutError) return new BouncerTimeoutError();
  return new BouncerUnavailableError(err instanceof ShimError && 'detail' in err ? String(err.detail) : 'error');
}
