import { STATUS_CODES, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';

/**
 * Error codes the shim itself produces (contract E2, E3). Everything else that looks like an
 * error came from the upstream and is passed on unchanged (E1).
 */
export type ShimErrorCode =
  | 'UPSTREAM_UNAVAILABLE'
  | 'UPSTREAM_TIMEOUT'
  | 'UPSTREAM_BAD_RESPONSE'
  | 'BAD_REQUEST'
  | 'REPLAY_MISS'
  | 'SHIM_INTERNAL_ERROR';

/**
 * An error the shim answers itself, in Zulip's shape: {"result":"error","msg":…,"code":…}.
 * One class per failure with a fixed code (as undici's core errors): callers test with
 * `instanceof`, never by name.
 */
export class ShimError extends Error {
  constructor(
    readonly status: number,
    readonly code: ShimErrorCode,
    message: string,
    /** A 503 the client should retry: the seconds it is asked to wait (sent as Retry-After). */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = 'ShimError';
  }
}

/** The upstream could not be reached, or cut the connection before a complete answer (E2). */
export class UpstreamUnavailableError extends ShimError {
  constructor(readonly detail: string) {
    super(502, 'UPSTREAM_UNAVAILABLE', `The Zulip server could not be reached: ${detail}`);
  }
}

/** The upstream was silent past the timeout, or a buffered exchange passed its total deadline (E2, X3). */
export class UpstreamTimeoutError extends ShimError {
  constructor() {
    super(504, 'UPSTREAM_TIMEOUT', 'The Zulip server did not answer in time');
  }
}

/** A 2xx answer that is not what an intercepted endpoint expects (E2). */
export class UpstreamBadResponseError extends ShimError {
  constructor(detail: string) {
    super(502, 'UPSTREAM_BAD_RESPONSE', `The Zulip server sent an unexpected answer: ${detail}`);
  }
}

/** An upstream answer larger than the shim will buffer: a bad response (E2) that says how large. */
export class UpstreamAnswerTooLargeError extends UpstreamBadResponseError {
  constructor(
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(`body larger than ${limit} bytes`);
  }
}

/**
 * The client's request is wrong (E3): 400. Each other refusal of a client's request has a class
 * of its own below (all with the code BAD_REQUEST, which the answer's body carries).
 */
export class BadRequestError extends ShimError {
  constructor(msg: string) {
    super(400, 'BAD_REQUEST', msg);
  }
}

/** No route for the request (404). */
export class NotFoundError extends ShimError {
  constructor(msg = 'Not Found') {
    super(404, 'BAD_REQUEST', msg);
  }
}

/** A method the shim does not serve there (405), e.g. CONNECT (E4). */
export class MethodNotAllowedError extends ShimError {
  constructor(msg: string) {
    super(405, 'BAD_REQUEST', msg);
  }
}

/** X11: a request body that did not arrive in time, or stopped arriving (408). */
export class BodyTimeoutError extends ShimError {
  constructor(msg: string) {
    super(408, 'BAD_REQUEST', msg);
  }
}

/** A request body larger than the shim reads (413). */
export class BodyTooLargeError extends ShimError {
  constructor(readonly limit: number) {
    super(413, 'BAD_REQUEST', `Request body too large (limit ${limit} bytes)`);
  }
}

/** A request Node's parser refused (its status: 400, 408, 413 or 431), answered on the socket. */
export class MalformedRequestError extends ShimError {
  constructor(status: number, reason: string) {
    super(status, 'BAD_REQUEST', `Malformed HTTP request: ${reason}`);
  }
}

/** Replay has no recorded answer for a request (H2). Not the testing API's ReplayMissError, which close() rejects with. */
export class NoRecordedAnswerError extends ShimError {
  constructor(what: string) {
    super(502, 'REPLAY_MISS', `No recorded answer for ${what}`);
  }
}

export const upstreamUnavailable = (detail: string) => new UpstreamUnavailableError(detail);
export const upstreamBadResponse = (detail: string) => new UpstreamBadResponseError(detail);
export const badRequest = (msg: string) => new BadRequestError(msg);
export const bodyTooLarge = (limit: number) => new BodyTooLargeError(limit);
/** X11: a request body that did not arrive within server.bodyTimeoutMs. */
export const bodyTimedOut = (ms: number) => new BodyTimeoutError(`Request body not received within ${ms} ms`);
/** X11: a request body that stopped arriving (less than `bytes` in `ms`, server.bodyReadTimeoutMs). */
export const bodyStalled = (bytes: number, ms: number) =>
  new BodyTimeoutError(`Request body stalled: less than ${bytes} bytes of it arrived in ${ms} ms`);
/** A parser error's answer: its status, and its reason phrase as the message. */
export const malformedRequest = (status: number) => new MalformedRequestError(status, STATUS_CODES[status] ?? 'Bad Request');

export function errorBody(code: string, msg: string): string {
  return JSON.stringify({ result: 'error', msg, code });
}

/** Serialises JSON once and sends it with an exact Content-Length. */
export function sendJson(res: ServerResponse, status: number, body: unknown, headers: OutgoingHttpHeaders = {}): void {
  sendBytes(res, status, Buffer.from(typeof body === 'string' ? body : JSON.stringify(body)), headers);
}

export function sendBytes(res: ServerResponse, status: number, bytes: Buffer, headers: OutgoingHttpHeaders = {}): void {
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': String(bytes.length),
    ...headers,
  });
  res.end(bytes);
}

/**
 * The one writer of shim errors (E2): answers in Zulip's shape, or gives up on the socket if
 * an answer has already started.
 */
export function sendShimError(res: ServerResponse, err: ShimError, headers: OutgoingHttpHeaders = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const retry = err.retryAfterSeconds === undefined ? {} : { 'retry-after': String(err.retryAfterSeconds) };
  sendJson(res, err.status, errorBody(err.code, err.message), { ...retry, ...headers });
}

/** The same answer on a socket that has no response object (a parser error, CONNECT, an upgrade). */
export function endSocketWithShimError(socket: Duplex, err: ShimError, headers: Record<string, string> = {}): void {
  const body = errorBody(err.code, err.message);
  if (err.retryAfterSeconds !== undefined) headers = { 'Retry-After': String(err.retryAfterSeconds), ...headers };
  socket.end(
    [
      `HTTP/1.1 ${err.status} ${STATUS_CODES[err.status] ?? 'Error'}`,
      'Content-Type: application/json',
      `Content-Length: ${Buffer.byteLength(body)}`,
      ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
      'Connection: close',
      '',
      body,
    ].join('\r\n'),
  );
}

export function toShimError(err: unknown): ShimError {
  if (err instanceof ShimError) return err;
  return new ShimError(500, 'SHIM_INTERNAL_ERROR', 'Internal error in zulip-compat-shim');
}
