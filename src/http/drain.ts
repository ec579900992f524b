import type { Server, ServerResponse } from 'node:http';
import { sendShimError, ShimError } from './errors.js';
import type { InFlightAnswers } from './in-flight.js';

/**
 * X9: a graceful stop of the listeners. No new connections; each answer from now on, and each in
 * flight whose head is not written yet, closes its connection; kept-alive connections close as
 * they go idle; at the deadline what is still waiting is answered (`atDeadline`), and a moment
 * later every connection left is cut. Resolves when every listener has closed and every request
 * handed over by another server (`handedOver`) has its answer, or at the deadline.
 */

/** X9: the answer to a request the shim no longer takes, or no longer has time for. */
export const shuttingDown = () => new ShimError(503, 'UPSTREAM_UNAVAILABLE', 'zulip-compat-shim is restarting; try again');

/** After the drain deadline, how long the last answers get to leave before sockets are cut (X9). */
const FINAL_CLOSE_MS = 1_000;
/** How often idle connections are closed, and the handed-over count read, while draining. */
const SWEEP_MS = 100;

export interface DrainOptions {
  /** The public listener: closed whether or not it listens. */
  server: Server;
  /** Listeners beside it (admin, push relay): they stop with it; those not listening are left. */
  sides: readonly Server[];
  /** The answers not yet closed. */
  inFlight: InFlightAnswers;
  /** How long in-flight requests get. */
  graceMs: number;
  /** Requests handed over by another server (`handle`) whose answers are not done: no connection of ours shows them. */
  handedOver(): number;
  /** At the deadline, once the answers are dealt with: close what is no listener's (the pass-through's WebSocket tunnels). */
  cut(): void;
}

/**
 * X9: at the drain deadline, a request still waiting for its answer (a held long poll, say) gets
 * a Zulip-shaped 503 and `Connection: close`, not a reset; an answer already streaming cannot be
 * ended cleanly and is cut.
 */
function atDeadline(res: ServerResponse, requestId: string): void {
  if (res.headersSent) res.destroy();
  else sendShimError(res, shuttingDown(), { connection: 'close', 'retry-after': '1', 'x-request-id': requestId });
}

export function drain(o: DrainOptions): Promise<void> {
  const all = [o.server, ...o.sides];
  for (const { res } of o.inFlight) if (!res.headersSent) res.shouldKeepAlive = false;
  return new Promise<void>((resolve) => {
    const deadline = setTimeout(() => {
      for (const { res, requestId } of o.inFlight) atDeadline(res, requestId);
      o.cut();
      setTimeout(() => {
        for (const s of all) s.closeAllConnections();
      }, FINAL_CLOSE_MS).unref();
    }, o.graceMs);
    deadline.unref();
    let serversClosed = false;
    const drained = () => {
      clearTimeout(deadline);
      clearInterval(sweep);
      resolve();
    };
    // A kept-alive connection goes idle when its in-flight request ends: close it then, rather
    // than holding shutdown for the whole grace period.
    const sweep = setInterval(() => {
      for (const s of all) s.closeIdleConnections();
      if (serversClosed && o.handedOver() === 0) drained();
    }, SWEEP_MS);
    sweep.unref();
    const closing = [o.server, ...o.sides.filter((side) => side.listening)];
    let open = closing.length;
    const closed = () => {
      if (--open > 0) return;
      serversClosed = true;
      if (o.handedOver() === 0) drained();
    };
    for (const s of closing) s.close(closed);
    for (const s of all) s.closeIdleConnections();
  });
}
