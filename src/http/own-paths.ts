import type { IncomingMessage, ServerResponse } from 'node:http';
import { errorBody, sendJson, sendShimError, toShimError } from './errors.js';

/**
 * The shim's own paths (`/healthz`, `/readyz`, `/metrics`): answered here whatever the `Host`,
 * never passed on; on the public listener, or with `server.adminListen` on that one alone.
 */

export const OWN_PATHS = ['/healthz', '/readyz', '/metrics'] as const;
export type OwnPath = (typeof OWN_PATHS)[number];

/** One thing /readyz waits for: what is wrong when it throws, and the check. */
export type ReadinessCheck = readonly [problem: string, check: () => Promise<unknown>];

export interface OwnPathsOptions {
  /** What /readyz asks, in order, for this request (its Host picks the realm the upstream is asked for). */
  readiness(req: IncomingMessage): readonly ReadinessCheck[];
  /** Whether a failed check's message is the shim's own words, fit for an operator (then added to the answer). */
  explains(err: unknown): boolean;
  /** Where /metrics is written from (prom-client's Registry). */
  registry: { metrics(): Promise<string>; readonly contentType: string };
  /** Told of a fault in answering one of these paths (answered 500). */
  failed(err: unknown): void;
}

/** Answers one of the shim's own paths; GET and HEAD only (a 405 otherwise). */
export type ServeOwn = (path: OwnPath, req: IncomingMessage, res: ServerResponse) => Promise<void>;

async function ready(o: OwnPathsOptions, req: IncomingMessage, res: ServerResponse): Promise<void> {
  for (const [problem, check] of o.readiness(req)) {
    try {
      await check();
    } catch (e) {
      // Our own words: a library's internal wording means little to an operator.
      const detail = o.explains(e) ? ` (${(e as Error).message})` : '';
      sendJson(res, 503, { result: 'error', msg: `not ready: ${problem}${detail}`, code: 'NOT_READY' });
      return;
    }
  }
  sendJson(res, 200, { result: 'success', msg: '', status: 'ready' });
}

export function ownPaths(o: OwnPathsOptions): ServeOwn {
  const answers: Record<OwnPath, (req: IncomingMessage, res: ServerResponse) => Promise<void>> = {
    '/healthz': async (_req, res) => sendJson(res, 200, { result: 'success', msg: '', status: 'alive' }),
    '/readyz': (req, res) => ready(o, req, res),
    '/metrics': async (_req, res) => {
      const text = await o.registry.metrics();
      res.writeHead(200, { 'content-type': o.registry.contentType });
      res.end(text);
    },
  };
  return async (path, req, res) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      sendJson(res, 405, errorBody('BAD_REQUEST', 'Method Not Allowed'), { allow: 'GET, HEAD' });
      return;
    }
    try {
      await answers[path](req, res);
    } catch (e) {
      o.failed(e);
      sendShimError(res, toShimError(e));
    }
  };
}
