import type { IncomingMessage } from 'node:http';

/** Per-request facts for the request log line. */
export interface RequestFacts {
  upstreamMs?: number;
  realm?: string;
  featureLevel?: number;
  kind?: string;
  /**
   * The registry changes applied to this request (changes/index.ts: each change's feature name),
   * each once, in the order applied; counted by client_requests_total (client-requests.ts).
   */
  changes?: string[];
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

/** Records that the change named `id` (a feature of the registry) was applied to this request. */
export function recordChange(req: IncomingMessage, id: string): void {
  const f = recordFacts(req);
  if (f.changes === undefined) f.changes = [id];
  else if (!f.changes.includes(id)) f.changes.push(id);
}

/** Records each of `ids` as applied to this request (recordChange). */
export function recordChanges(req: IncomingMessage, ids: Iterable<string>): void {
  for (const id of ids) recordChange(req, id);
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
