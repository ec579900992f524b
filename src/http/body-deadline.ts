import type { IncomingMessage, ServerResponse } from 'node:http';
import { bodyStalled, bodyTimedOut, sendShimError } from './errors.js';
import { contentLengthOf, declaresBody } from './headers.js';

/**
 * X11: a request body must keep arriving. Two deadlines, either of which ends the request with
 * a Zulip-shaped 408 and `Connection: close`, and lets go of whatever it holds upstream
 * (`release`: a pass-through's upstream request, whose connection a client dripping its body
 * would otherwise hold):
 *
 * - **a minimum rate**: in every `windowMs` at least MIN_BYTES_PER_WINDOW bytes of it arrive (or
 *   its end). nginx's `client_body_timeout` is a deadline per read, which a byte every few
 *   seconds passes; a kilobyte per window is what a drip does not send, and a link slower than
 *   that for a whole window is stalled. A window in which the shim itself stopped reading (its
 *   buffer for the body was full: an upload waiting for an upstream connection, or an upstream
 *   that takes it slowly) is not held against the client.
 * - **a total**, `totalMs` from the request's start, large enough for a big upload over a slow
 *   link (25 MB at 100 KB/s takes 250 s).
 *
 * A request without a body, or whose body has already arrived, is not watched.
 */

/** Bytes of a body that must arrive in each window (about 200 B/s at the default 5 s). */
export const MIN_BYTES_PER_WINDOW = 1024;

export interface BodyLimits {
  /** The whole body within this long of the request's start. */
  totalMs: number;
  /** At least MIN_BYTES_PER_WINDOW bytes in each such window. */
  windowMs: number;
}

/** What a 408 tells the log: how much of the body had come, and which deadline it missed. */
export interface BodyTimeout {
  reason: 'total' | 'stalled';
  /** Body bytes received (after any chunked framing). */
  bytes: number;
  /** The Content-Length it declared, if any. */
  declared: number | undefined;
  /** Milliseconds from the request's start. */
  ms: number;
}

export interface BodyWatch {
  /** The request's hold upstream ends (the 408 is about to be sent). */
  release(): void;
  /** The 408 is being sent (logged at warn by the caller, with the bytes received). */
  timedOut(facts: BodyTimeout): void;
  /** Once: the body has all arrived, or the answer closed first. */
  ended?(): void;
}

/** Does this request have a body still to come (what `watchBody` watches, and what counts as an upload)? */
export const bodyToCome = (req: IncomingMessage): boolean => !req.complete && declaresBody(req.headers);

/** Watches a body still to come (see `bodyToCome`); `headers` go on the 408. */
export function watchBody(
  req: IncomingMessage,
  res: ServerResponse,
  limits: BodyLimits,
  headers: Record<string, string>,
  w: BodyWatch,
): void {
  if (!bodyToCome(req)) return;
  const started = performance.now();
  let received = 0;
  let atWindowStart = 0;
  /** The shim's buffer for the body filled in this window: it stopped reading, the client did not stall. */
  let heldBack = false;
  let finished = false;
  const finish = () => {
    if (finished) return false;
    finished = true;
    clearTimeout(total);
    clearTimeout(windowTimer);
    w.ended?.();
    return true;
  };
  const cut = (reason: BodyTimeout['reason']) => {
    if (!finish()) return;
    w.release();
    w.timedOut({ reason, bytes: received, declared: contentLengthOf(req.headers), ms: Math.round(performance.now() - started) });
    // The rest of the body is never read: the connection ends with this answer.
    const err = reason === 'total' ? bodyTimedOut(limits.totalMs) : bodyStalled(MIN_BYTES_PER_WINDOW, limits.windowMs);
    sendShimError(res, err, { ...headers, connection: 'close' });
  };
  const total = setTimeout(() => cut('total'), limits.totalMs);
  const windowTimer = setTimeout(() => {
    if (received - atWindowStart < MIN_BYTES_PER_WINDOW && !heldBack && req.readableLength < req.readableHighWaterMark) {
      cut('stalled');
      return;
    }
    atWindowStart = received;
    heldBack = false;
    windowTimer.refresh();
  }, limits.windowMs);
  total.unref();
  windowTimer.unref();
  // Node's parser hands each piece of the body to `push` as it is read, and `push(null)` when the
  // whole body has come: counted here without reading the stream (a `data` listener would start
  // it flowing before its consumer is there).
  const push = req.push;
  req.push = (chunk: unknown, encoding?: BufferEncoding) => {
    const more = push.call(req, chunk, encoding);
    if (chunk === null) finish();
    else {
      received += (chunk as Buffer).length;
      if (!more) heldBack = true;
    }
    return more;
  };
  res.once('close', finish);
}
