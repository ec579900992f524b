import type { IncomingMessage, ServerResponse } from 'node:http';
import { createShim, resolveConfig, type Shim, type ShimOptions } from './index.js';
import { bodyReadBefore, requestFromParsedBody } from './http/parsed-body.js';

/**
 * `import { zulipCompatShim } from 'zulip-compat-shim/express'`: the shim as Connect/Express
 * middleware (Express 4 and 5). A middleware is a function of (req, res, next): nothing here
 * imports Express. Before any body parser, the shim reads (or streams upstream) the request body
 * itself; after one (`express.json()`, `express.urlencoded()` mounted globally), it sends on
 * what the parser read, rebuilt from `req.body` (http/parsed-body.ts), as http-proxy-middleware's
 * `fixRequestBody` does. Quiet by default: no access line unless `log: { access: 'on' }`.
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

/**
 * The error given to `next` when something read the request body before the middleware and left
 * nothing it can be rebuilt from: a raw stream read, multipart (its files taken away), text in
 * another charset than UTF-8.
 */
export class BodyConsumedError extends Error {
  override name = 'BodyConsumedError';
  readonly status = 500;
}

/**
 * The middleware. Throws ConfigError at once when the options are not valid; a failure to open
 * the upstream (an unreadable HAR file, say) is given to `next` on each request.
 */
export function zulipCompatShim(options: ZulipCompatShimOptions = {}): ZulipCompatShimMiddleware {
  const { passThrough = true, ...given } = options;
  // Middleware is quiet unless asked: the app's own log has its requests (access lines: `log.access`).
  const shimOptions: ShimOptions = { ...given, log: { access: 'off', ...given.log } };
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
    if (!bodyReadBefore(req)) {
      s.handle(req, res);
      return;
    }
    const rebuilt = requestFromParsedBody(req as IncomingMessage & { body?: unknown });
    if (rebuilt) {
      s.handle(rebuilt, res);
      return;
    }
    next(
      new BodyConsumedError(
        `zulip-compat-shim: the request body (${req.headers['content-type'] ?? 'no Content-Type'}) was read before the shim got it and cannot be rebuilt from req.body; mount the middleware before that body parser`,
      ),
    );
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
