import type { IncomingMessage, ServerResponse } from 'node:http';
import { errorBody, type ShimError } from './errors.js';

/** After a 413, how much more of the body is read and dropped, so the client reads the answer (X6). */
const DISCARD_AFTER_413_BYTES = 64 * 1024 * 1024;
/** …for how long at most… */
const DISCARD_AFTER_413_MS = 10_000;
/** …and no longer than the client keeps sending: a stalled client is not waited for. */
const DISCARD_AFTER_413_IDLE_MS = 1_000;

/**
 * A 413 a client can read even when it writes its whole body before reading (X6): the answer is
 * written at once, then the rest of the body is read and dropped (up to a bound in bytes and
 * time, and while the client keeps sending), and only then is the response, and by
 * `Connection: close` the socket, ended. Closing with unread bytes in flight would make the
 * client's kernel see a reset, not the answer.
 */
export function answerTooLarge(req: IncomingMessage, res: ServerResponse, err: ShimError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = Buffer.from(errorBody(err.code, err.message));
  res.writeHead(err.status, { 'content-type': 'application/json', 'content-length': String(body.length), connection: 'close' });
  res.write(body);
  if (req.complete) {
    res.end();
    return;
  }
  let dropped = 0;
  const done = () => {
    clearTimeout(timer);
    clearTimeout(idle);
    req.off('data', drop).off('end', done).off('error', done);
    res.end();
  };
  const drop = (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > DISCARD_AFTER_413_BYTES) done();
    else idle.refresh();
  };
  const timer = setTimeout(done, DISCARD_AFTER_413_MS);
  const idle = setTimeout(done, DISCARD_AFTER_413_IDLE_MS);
  timer.unref();
  idle.unref();
  req.on('data', drop);
  req.once('end', done);
  req.once('error', done);
  req.resume();
}
