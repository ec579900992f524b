import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

/**
 * P13: identity is the realm, the upstream plus the `Host` the client asked for. A Zulip
 * server may serve several organisations (realms) by host name.
 */
export interface Realm {
  /** The upstream's origin, e.g. `https://chat.example.com`. */
  readonly upstream: string;
  /** The Host header the client sent (lower-cased), which Zulip uses to pick the realm. */
  readonly host: string;
  /** Stable key for maps and stores: never contains a credential. */
  readonly key: string;
}

export function realmOf(upstream: string, headers: IncomingHttpHeaders): Realm {
  const host = (headers.host ?? '').toLowerCase();
  return { upstream, host, key: `${upstream}|${host}` };
}

/**
 * A key standing for one caller's credentials without holding them (P13): a SHA-256 of the
 * Authorization header and session cookie, salted per process so it is useless elsewhere.
 * Used only to tell callers apart (per-caller snapshots, per-user lookups), never stored raw.
 */
const SALT = createHash('sha256').update(`${process.pid}:${Date.now()}:${Math.random()}`).digest();
export function callerKey(headers: IncomingHttpHeaders): string {
  const h = createHash('sha256');
  h.update(SALT);
  h.update(headers.authorization ?? '');
  h.update('\0');
  h.update(headers.cookie ?? '');
  return h.digest('base64url').slice(0, 22);
}

/**
 * Whether a request carries anything that may be credentials (an Authorization header, a
 * cookie). One without is a logged-out visitor's, or one the upstream refuses.
 */
export function hasCredentials(headers: IncomingHttpHeaders): boolean {
  return Boolean(headers.authorization || headers.cookie);
}
