import type { IncomingHttpHeaders } from 'node:http';

/** Connection-level headers, never passed on in either direction (RFC 9110 §7.6.1). */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'expect',
]);

/**
 * The end-to-end headers of a message: without the hop-by-hop ones, those the Connection header
 * names, and any in `drop` (lower-case names).
 */
export function endToEnd(headers: IncomingHttpHeaders, drop?: ReadonlySet<string>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const listed = headers.connection;
  const named = listed
    ? new Set(
        String(listed)
          .toLowerCase()
          .split(',')
          .map((s) => s.trim()),
      )
    : undefined;
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined || HOP_BY_HOP.has(k) || named?.has(k) || drop?.has(k)) continue;
    out[k] = v;
  }
  return out;
}
