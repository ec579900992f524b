import { upstreamBadResponse } from '../http/errors.js';
import type { BufferedResponse } from '../upstream/client.js';
import { timeOfDateHeader } from './ledger.js';

/**
 * The upstream's time of an answer (P6): what orders its observations, never the shim's clock.
 * A full presence answer or a register answer has its `server_timestamp`; a report's answer
 * (P15) and a register answer before 5.0 only their `Date` header.
 */

/** The upstream's time for an answer (P6): its server_timestamp, else its Date header. */
export function upstreamTime(body: Record<string, unknown>, headers: BufferedResponse['headers']): number {
  const ts = body.server_timestamp;
  if (typeof ts === 'number' && Number.isFinite(ts)) return ts;
  const date = dateHeaderTime(headers);
  if (date !== undefined) return date;
  throw upstreamBadResponse('presence answer without server_timestamp or Date');
}

/**
 * The upstream's time by its `Date` header (P6), dated at the end of that second; undefined
 * without one. It never outranks an answer of that second with a `server_timestamp` (ledger.ts
 * `upstreamOrder`, I3).
 */
export function dateHeaderTime(headers: BufferedResponse['headers']): number | undefined {
  const date = Date.parse(String(headers.date ?? ''));
  return Number.isFinite(date) ? timeOfDateHeader(date) : undefined;
}
