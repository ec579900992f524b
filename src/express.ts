import type { IncomingMessage, ServerResponse } from 'node:http';
import { createShim, resolveConfig, type Shim, type ShimOptions } from './index.js';
import { declaresBody } from './http/headers.js';

/**
 * `import { zulipCompatShim } from 'zulip-compat-shim/express'`: the shim as Connect/Express
 * middleware (Express 4 and 5). A middleware is a function of (req, res, next): nothing here
 * imports Express. Mount it before any body parser: the shim reads (or streams upstream) the
 * request body itself.
 */

export interface ZulipCompatShimOptions extends ShimOptions {
  /**
   * true (the default): every request that reaches the middleware is answered, the intercepted
   * endpoints by the shim, everything else passed through to the upstream (and the shim's own
   * /healthz, /readyz and /metrics answered). false: only the intercepted endpoints are answered,
   * and every other request goes on to `next()`, for the app's own routes or proxy.
   */
  passThrough?: boolean;
}

/** What Connect and Express give a middleware as `next`. */
export type NextFunction = (err?: unknown) => void;

export interface ZulipCompatShimMiddleware {
  (req: IncomingMessage, res: ServerResponse, next: NextFunction): void;
  /** The shim, once its upstream (or replay) is open; requests that come earlier wait for it. */
  readonly ready: Promise<Shim>;
  /** Drains the shim and closes its upstream stand-in (the app's server is yours to close). */
  close(): Promise<void>;
}

/** The error given to `next` when a body parser ran before the middleware. */
export class BodyConsumedError extends Error {
  override name = 'BodyConsumedError';
  readonly status = 500;
}

/** The request declares a body and something has read it already (as on-finished tells it). */
function bodyConsumed(req: IncomingMessage): boolean {
  return declaresBody(req.headers) && (req.readableEnded || (req.complete && !req.readable));
}

/**
 * The middleware. Throws ConfigError at once when the options are not valid; a failure to open
 * the upstream (an unreadable HAR file, say) is given to `next` on each request.
 */
export function zulipCompatShim(options: ZulipCompatShimOptions = {}): ZulipCompatShimMiddleware {
  const { passThrough = true, ...shimOptions } = options;
  resolveConfig(shimOptions);
  const ready = createShim(shimOptions);
  let shim: Shim | undefined;
  let closed = false;
  // A failure is reported to each request through next(err), and to whoever awaits `ready`.
  ready.then(
    (s) => {
      shim = s;
    },
    () => {},
  );

  const serve = (s: Shim, req: IncomingMessage, res: ServerResponse, next: NextFunction) => {
    if (!passThrough && !s.intercepts(req)) {
      next();
      return;
    }
    if (bodyConsumed(req)) {
      next(
        new BodyConsumedError(
          'zulip-compat-shim: the request body was read before the shim got it; mount the middleware before any body parser',
        ),
      );
      return;
    }
    s.handle(req, res);
  };

  const middleware = (req: IncomingMessage, res: ServerResponse, next: NextFunction) => {
    if (shim) {
      serve(shim, req, res, next);
      return;
    }
    ready.then(
      (s) => serve(s, req, res, next),
      (e: unknown) => next(e),
    );
  };
  return Object.assign(middleware, {
    ready,
    close: async () => {
      if (closed) return;
      closed = true;
      const s = await ready.catch(() => undefined);
      await s?.close();
    },
  });
}
