import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';

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

/** An error the shim answers itself, in Zulip's shape: {"result":"error","msg":…,"code":…}. */
export class ShimError extends Error {
  constructor(
    readonly status: number,
    readonly code: ShimErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'ShimError';
  }
}

export const upstreamUnavailable = (detail: string) =>
  new ShimError(502, 'UPSTREAM_UNAVAILABLE', `The Zulip server could not be reached: ${detail}`);
export const upstreamTimeout = () => new ShimError(504, 'UPSTREAM_TIMEOUT', 'The Zulip server did not answer in time');
export const upstreamBadResponse = (detail: string) =>
  new ShimError(502, 'UPSTREAM_BAD_RESPONSE', `The Zulip server sent an unexpected answer: ${detail}`);
export const badRequest = (msg: string) => new ShimError(400, 'BAD_REQUEST', msg);
export const bodyTooLarge = (limit: number) => new ShimError(413, 'BAD_REQUEST', `Request body too large (limit ${limit} bytes)`);

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

/** Answers with a shim error, or gives up on the socket if the answer has already started. */
export function sendShimError(res: ServerResponse, err: ShimError, headers: OutgoingHttpHeaders = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  sendJson(res, err.status, errorBody(err.code, err.message), headers);
}

export function toShimError(err: unknown): ShimError {
  if (err instanceof ShimError) return err;
  return new ShimError(500, 'SHIM_INTERNAL_ERROR', 'Internal error in zulip-compat-shim');
}
