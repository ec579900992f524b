import type { IncomingMessage } from 'node:http';

/** Per-request facts for the request log line. */
export interface RequestFacts {
  upstreamMs?: number;
  realm?: string;
  featureLevel?: number;
  kind?: string;
}

const FACTS = Symbol('zulip-compat-shim request facts');

/** The request's facts, to add to (made on first use). */
export function recordFacts(req: IncomingMessage): RequestFacts {
  const r = req as IncomingMessage & { [FACTS]?: RequestFacts };
  r[FACTS] ??= {};
  return r[FACTS];
}

/** The request's facts so far, without adding any (the log line reads them). */
export function recordedFacts(req: IncomingMessage): RequestFacts {
  return (req as IncomingMessage & { [FACTS]?: RequestFacts })[FACTS] ?? NO_FACTS;
}

const NO_FACTS: RequestFacts = Object.freeze({});

/** Times an upstream call and adds it to the request's upstream time. */
export async function timedUpstream<T>(req: IncomingMessage, call: () => Promise<T>): Promise<T> {
  const start = performance.now();
  try {
    return await call();
  } finally {
    const f = recordFacts(req);
    f.upstreamMs = (f.upstreamMs ?? 0) + Math.round(performance.now() - start);
  }
}
