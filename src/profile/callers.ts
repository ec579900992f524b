import { upstreamBadResponse } from '../http/errors.js';
import { isSuccess } from '../http/relay.js';
import type { Metrics } from '../observability/metrics.js';
import { SharedCache } from '../store/shared-cache.js';
import { parseJsonObject, type UpstreamClient } from '../upstream/client.js';
import { callerKey, type Realm } from '../upstream/realm.js';
import type { IncomingHttpHeaders } from 'node:http';

/**
 * V2 before 6.0: who a caller is (its user id, and its real address where its own user shows
 * it), from its own GET /users/me, cached per caller so that a GET /users with hidden addresses
 * does not ask the upstream every time. Keyed by realm and `callerKey` (P13: a salted hash of the
 * credentials, never the credentials), so kept in this process only: the salt is its own.
 * Bounded in bytes (X2), reused for lookups.ttlMs; a failure is not cached.
 */

export interface Caller {
  userId: number;
  /** The caller's real address, when its own user carries it (from 6.0, or a realm that shows it). */
  deliveryEmail?: string | undefined;
}

export interface CallerOptions {
  ttlMs: number;
  /** Callers kept at most. */
  maxEntries: number;
  /** X2: bytes the cached callers may take. */
  maxBytes: number;
}

interface LoadContext {
  realm: Realm;
  path: string;
  headers: Record<string, string>;
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
      // The key (realm and caller hash) and the address, with the entry's own overhead.
      sizeOf: (c, key) => 200 + 2 * (key.length + (c.deliveryEmail?.length ?? 0)),
      lookups: metrics.lookups,
      load: (_key, context) => this.load(context),
    });
  }

  /**
   * The caller the request's credentials stand for, asked of the upstream at `path` (its
   * GET …/users/me) when not cached. Serve it only after the upstream has accepted these
   * credentials for the request at hand.
   */
  get(realm: Realm, credentials: IncomingHttpHeaders, path: string, headers: Record<string, string>): Promise<Caller> {
    return this.cache.get(`${realm.key}|${callerKey(credentials)}`, { realm, path, headers });
  }

  private async load({ realm, path, headers }: LoadContext): Promise<Caller> {
    const r = await this.client.fetch({ realm, method: 'GET', path, headers });
    if (!isSuccess(r.status)) throw upstreamBadResponse(`GET /users/me answered HTTP ${r.status}`);
    const me = parseJsonObject(r.body);
    const userId = me.user_id;
    if (typeof userId !== 'number' || !Number.isInteger(userId)) throw upstreamBadResponse('GET /users/me has no user_id');
    return typeof me.delivery_email === 'string' ? { userId, deliveryEmail: me.delivery_email } : { userId };
  }
}
