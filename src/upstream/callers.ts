import { upstreamBadResponse } from '../http/errors.js';
import type { MemoryPool } from '../cache/memory-pool.js';
import { isSuccess } from './relay.js';
import type { Metrics } from '../observability/metrics.js';
import { SharedCache } from '../cache/shared-cache.js';
import { forwardedHeaders, parseJsonObject, type UpstreamClient } from './client.js';
import { callerKey, type Realm } from './realm.js';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';

/**
 * V2 before 6.0: who a caller is (its user id, and its real address where its own user shows
 * it), from its own GET /users/me (asked here, or as the own profile relayed it), cached per
 * caller so that a GET /users with hidden addresses does not ask the upstream every time. Keyed
 * by realm and `callerKey` (P13: a salted hash of the credentials, never the credentials), so
 * kept in this process only: the salt is its own.
 * Bounded in bytes (X2), reused for lookups.ttlMs; a failure is not cached.
 */

export interface Caller {
  userId: number;
  /** A bot: its presence is never shown (P7). */
  isBot?: boolean | undefined;
  /** The caller's real address, when its own user carries it (from 6.0, or a realm that shows it). */
  deliveryEmail?: string | undefined;
}

export interface CallerOptions {
  ttlMs: number;
  /** Callers kept at most. */
  maxEntries: number;
  /** X2: bytes the cached callers may take. */
  maxBytes: number;
  /** X2: the shim's cap over all its budgets (memory.totalBytes; cache/memory-pool.ts). */
  pool?: MemoryPool | undefined;
}

interface LoadContext {
  realm: Realm;
  path: string;
  /** The client's request, whose headers (forwardedHeaders) the lookup sends: made only on a miss. */
  req: IncomingMessage;
}

export class Callers {
  private readonly cache: SharedCache<Caller, LoadContext>;

  constructor(
    private readonly client: UpstreamClient,
    metrics: Metrics,
    options: CallerOptions,
  ) {
    this.cache = new SharedCache<Caller, LoadContext>({
      name: 'caller',
      ttlMs: options.ttlMs,
      max: options.maxEntries,
      maxBytes: options.maxBytes,
      pool: options.pool?.in('callers'),
      // The key (realm and caller hash) and the address, with the entry's own overhead.
      footprint: (c, key) => ({ fixed: 200, strings: [key, c.deliveryEmail] }),
      lookups: metrics.lookups,
      load: (_key, context) => this.load(context),
    });
  }

  /**
   * The caller the request's credentials stand for, asked of the upstream at `path` (its
   * GET …/users/me, with the request's forwarded headers) when not cached. Serve it only after
   * the upstream has accepted these credentials for the request at hand.
   */
  get(realm: Realm, req: IncomingMessage, path: string): Promise<Caller> {
    return this.cache.get(keyOf(realm, req.headers), { realm, path, req });
  }

  /**
   * Keeps the caller its own GET /users/me just answered (the own profile, after the upstream
   * accepted these credentials), so a GET /users that follows need not ask again.
   */
  remember(realm: Realm, credentials: IncomingHttpHeaders, me: Record<string, unknown>): void {
    const caller = callerOf(me);
    if (caller) void this.cache.set(keyOf(realm, credentials), caller);
  }

  private async load({ realm, path, req }: LoadContext): Promise<Caller> {
    const r = await this.client.fetch({ realm, method: 'GET', path, headers: forwardedHeaders(req) });
    if (!isSuccess(r.status)) throw upstreamBadResponse(`GET /users/me answered HTTP ${r.status}`);
    const caller = callerOf(parseJsonObject(r.body));
    if (!caller) throw upstreamBadResponse('GET /users/me has no user_id');
    return caller;
  }
}

function keyOf(realm: Realm, credentials: IncomingHttpHeaders): string {
  return `${realm.key}|${callerKey(credentials)}`;
}

/** The caller a GET /users/me answer names; undefined without a user id. Pure. */
function callerOf(me: Record<string, unknown>): Caller | undefined {
  const userId = me.user_id;
  if (typeof userId !== 'number' || !Number.isInteger(userId)) return undefined;
  const caller: Caller = { userId };
  if (me.is_bot === true) caller.isBot = true;
  if (typeof me.delivery_email === 'string') caller.deliveryEmail = me.delivery_email;
  return caller;
}
