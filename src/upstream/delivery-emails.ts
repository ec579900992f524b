import { upstreamBadResponse } from '../http/errors.js';
import type { MemoryPool } from '../cache/memory-pool.js';
import { encodeForm } from '../http/body.js';
import { isSuccess } from './relay.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import { SharedCache, type CacheBackend } from '../cache/shared-cache.js';
import type { UpstreamClient } from './client.js';
import type { Realm } from './realm.js';
import { apiPrefixFor } from '../http/api-prefix.js';

/**
 * The caller's real email address on servers that do not put it in their own user (before
 * 6.0): `POST /register` with `realm_user` has it at the top level in every era. Registering
 * opens an event queue, which is deleted at once (also when anything else fails), so the shim
 * never leaves one behind; a queue lost to a network failure expires upstream on its own.
 *
 * Cached per realm + user id (P13: never per credential), bounded, single flight, and shared by
 * replicas through the store when there is one (S1).
 */

interface DeliveryEmailOptions {
  ttlMs: number;
  /** Users kept in this process at most. */
  maxEntries: number;
  /** X2: bytes the cached addresses may take in this process. */
  maxBytes: number;
  /** X2: the shim's cap over all its budgets (memory.totalBytes; cache/memory-pool.ts). */
  pool?: MemoryPool | undefined;
  backend?: CacheBackend | undefined;
}

interface LoadContext {
  realm: Realm;
  userId: number;
  headers: Record<string, string>;
}

const FORM = { 'content-type': 'application/x-www-form-urlencoded' };

/** Only the realm_user data; the queue listens to nothing else while it briefly exists. */
const REGISTER_BODY = encodeForm([
  ['event_types', '["realm_user"]'],
  ['fetch_event_types', '["realm_user"]'],
]);

/**
 * A session-authenticated POST under /json needs Django's CSRF token, which the web app keeps
 * in its `csrftoken` cookie and echoes in `X-CSRFToken`: the shim echoes it the same way. Pure.
 */
function csrfFor(headers: Record<string, string>): Record<string, string> {
  if (headers.authorization || headers['x-csrftoken']) return {};
  const token = /(?:^|;\s*)csrftoken=([^;]+)/.exec(headers.cookie ?? '')?.[1];
  return token ? { 'x-csrftoken': token } : {};
}

/** The queue id of a register answer, also from a body that did not parse as expected. */
export function queueIdOf(body: Buffer): string | undefined {
  const text = body.toString('utf8');
  try {
    const v = JSON.parse(text) as { queue_id?: unknown };
    if (typeof v?.queue_id === 'string') return v.queue_id;
  } catch {
    // fall through to the textual search: a queue may exist even if the body is cut short
  }
  return /"queue_id"\s*:\s*"([^"\\]{1,200})"/.exec(text)?.[1];
}

/** The caller's delivery_email from a register answer, checked to be the expected user's. Pure. */
export function deliveryEmailOf(body: Buffer, userId: number): string {
  let v: Record<string, unknown>;
  try {
    v = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
  } catch {
    throw upstreamBadResponse('register answer is not JSON');
  }
  if (v?.user_id !== undefined && v.user_id !== userId) throw upstreamBadResponse('register answered for another user');
  if (typeof v?.delivery_email !== 'string' || v.delivery_email === '') throw upstreamBadResponse('register answer has no delivery_email');
  return v.delivery_email;
}

export class DeliveryEmails {
  private readonly cache: SharedCache<string, LoadContext>;

  constructor(
    private readonly client: UpstreamClient,
    private readonly log: Logger,
    metrics: Metrics,
    options: DeliveryEmailOptions,
  ) {
    this.cache = new SharedCache<string, LoadContext>({
      name: 'own_profile',
      ttlMs: options.ttlMs,
      max: options.maxEntries,
      maxBytes: options.maxBytes,
      pool: options.pool?.in('lookups'),
      // The key (realm and user id) and the address, with the entry's own overhead.
      footprint: (email, key) => ({ fixed: 200, strings: [key, email] }),
      backend: options.backend,
      lookups: metrics.lookups,
      load: (_key, context) => this.load(context),
    });
  }

  /**
   * The user's delivery email. `userId` must come from the caller's own successful
   * GET /users/me, so cached data only ever goes back to the user it belongs to.
   */
  get(realm: Realm, userId: number, headers: Record<string, string>): Promise<string> {
    return this.cache.get(`${realm.key}|${userId}`, { realm, userId, headers });
  }

  private async load({ realm, userId, headers }: LoadContext): Promise<string> {
    const r = await this.client.fetch({
      realm,
      method: 'POST',
      path: `${apiPrefixFor(headers)}/register`,
      headers: { ...headers, ...FORM, ...csrfFor(headers) },
      body: REGISTER_BODY,
    });
    const queueId = isSuccess(r.status) ? queueIdOf(r.body) : undefined;
    try {
      if (!isSuccess(r.status)) {
        this.log.warn({ realm: realm.host, status: r.status }, 'own profile: register for delivery_email failed');
        throw upstreamBadResponse(`register answered HTTP ${r.status}`);
      }
      return deliveryEmailOf(r.body, userId);
    } finally {
      if (queueId !== undefined) await this.deleteQueue(realm, headers, queueId);
    }
  }

  /** Never throws: a failure is logged, and the upstream expires the idle queue itself. */
  private async deleteQueue(realm: Realm, headers: Record<string, string>, queueId: string): Promise<void> {
    try {
      const r = await this.client.fetch({
        realm,
        method: 'DELETE',
        path: `${apiPrefixFor(headers)}/events`,
        headers: { ...headers, ...FORM, ...csrfFor(headers) },
        body: encodeForm([['queue_id', queueId]]),
      });
      if (!isSuccess(r.status)) this.log.warn({ realm: realm.host, status: r.status }, 'own profile: deleting the register queue failed');
    } catch (e) {
      this.log.warn({ realm: realm.host, err: { message: (e as Error).message } }, 'own profile: deleting the register queue failed');
    }
  }
}
