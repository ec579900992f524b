import type { IncomingMessage, ServerResponse } from 'node:http';
import { bodyTimedOut, sendShimError } from './errors.js';
import { declaresBody } from './headers.js';

/**
 * X11: a request body arrives within a total deadline from the request's start (nginx's
 * `client_body_timeout`, as a total), or the request gets a Zulip-shaped 408 with
 * `Connection: close` and whatever it holds upstream is let go (`release`: a pass-through's
 * upstream request, whose connection a client dripping its body would otherwise hold). A
 * request without a body, or whose body has arrived, is not watched.
 */
export function watchBodyDeadline(
  req: IncomingMessage,
  res: ServerResponse,
  ms: number,
  headers: Record<string, string>,
  release: () => void,
): void {
  if (req.complete || !declaresBody(req.headers)) return;
  const timer = setTimeout(() => {
    if (req.complete) return;
    release();
    // The rest of the body is never read: the connection ends with this answer.
    sendShimError(res, bodyTimedOut(ms), { ...headers, connection: 'close' });
  }, ms);
  timer.unref();
  const done = () => clearTimeout(timer);
  req.once('end', done);
  res.once('close', done);
}
