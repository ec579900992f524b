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

/** The header names a Connection header lists (RFC 9110 §7.6.1), if any. */
function connectionNamed(listed: string | string[] | undefined): Set<string> | undefined {
  // The usual values name no header (and are hop-by-hop themselves): no set to build.
  if (!listed || listed === 'keep-alive' || listed === 'close' || listed === 'Keep-Alive' || listed === 'upgrade') return undefined;
  return new Set(
    String(listed)
      .toLowerCase()
      .split(',')
      .map((s) => s.trim()),
  );
}

/**
 * Copies the end-to-end headers of a message into `to`: without the hop-by-hop ones, those the
 * Connection header names, and any in `drop` (lower-case names). The one header filter, for
 * both directions; a plain loop, as it runs on every proxied request and answer.
 */
export function copyEndToEnd(
  from: IncomingHttpHeaders,
  to: Record<string, string | string[]>,
  drop?: ReadonlySet<string>,
): Record<string, string | string[]> {
  const named = connectionNamed(from.connection);
  for (const k in from) {
    const v = from[k];
    if (v === undefined || HOP_BY_HOP.has(k) || named?.has(k) || drop?.has(k)) continue;
    to[k] = v;
  }
  return to;
}

/** The end-to-end headers of a message, as a new object (see copyEndToEnd). */
export function endToEnd(headers: IncomingHttpHeaders, drop?: ReadonlySet<string>): Record<string, string | string[]> {
  return copyEndToEnd(headers, {}, drop);
}

/**
 * The end-to-end headers of a message as a flat name/value list (Node's `rawHeaders` form, which
 * `writeHead` takes without building a header map), followed by the pairs in `extra` whose
 * names the message does not carry itself (the message's own value wins).
 */
export function endToEndList(from: IncomingHttpHeaders, extra: readonly string[] = []): string[] {
  const named = connectionNamed(from.connection);
  const out: string[] = [];
  for (const k in from) {
    const v = from[k];
    if (v === undefined || HOP_BY_HOP.has(k) || named?.has(k)) continue;
    if (typeof v === 'string') out.push(k, v);
    else for (const one of v) out.push(k, one);
  }
  for (let i = 0; i < extra.length; i += 2) if (from[extra[i]!] === undefined) out.push(extra[i]!, extra[i + 1]!);
  return out;
}

/** A message's declared Content-Length, when it gives a whole number; else undefined. */
export function contentLengthOf(headers: IncomingHttpHeaders): number | undefined {
  const text = headers['content-length'];
  if (text === undefined) return undefined;
  const n = Number(text);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/**
 * Whether a request declares a body (RFC 9112 §6.3): Transfer-Encoding says so whatever
 * Content-Length says, else a Content-Length other than 0. (Node refuses a request with both.)
 */
export function declaresBody(headers: IncomingHttpHeaders): boolean {
  return headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0');
}
