import { LRUCache } from 'lru-cache';
import type { Logger } from '../observability/logger.js';
import { upstreamBadResponse, upstreamUnavailable } from '../http/errors.js';
import { parseJsonObject, type UpstreamClient } from './client.js';
import type { Realm } from './realm.js';

/**
 * The feature levels the shim's behaviour turns on, so code reads `level >= FL.LAST_UPDATE_ID`.
 * (User-object fields and endpoints name theirs in src/profile/ and src/register/users.ts.)
 */
export const FL = {
  /** Zulip 3.0: `slim_presence` exists. */
  SLIM_PRESENCE: 25,
  /** One presence row per user (7.0 dev): slim presence is exact. */
  ONE_ROW_PER_USER: 178,
  /** Presence limited to the users a caller can access: callers may see different users. */
  PRESENCE_ACCESS_LIMIT: 228,
  /** The modern presence API: presence and register pass through untouched. */
  LAST_UPDATE_ID: 263,
} as const;

/** `zulip_feature_level` of a server_settings answer; absent = 0 = Zulip 2.1. */
export function featureLevelOf(settings: Record<string, unknown>): number {
  const fl = settings.zulip_feature_level;
  return typeof fl === 'number' && Number.isInteger(fl) && fl >= 0 ? fl : 0;
}

export interface ServerInfo {
  featureLevel: number;
  zulipVersion: string | undefined;
  /** When the upstream last answered server_settings (for /readyz). */
  fetchedAt: number;
}

/**
 * "The feature level of this realm": one cached, single-flight `GET /api/v1/server_settings`
 * per realm, refreshed in the background once stale, bounded in entries.
 */
export class FeatureLevels {
  private readonly cache: LRUCache<string, ServerInfo, Realm>;
  private lastSuccess = 0;

  constructor(
    private readonly client: UpstreamClient,
    private readonly log: Logger,
    ttlMs: number,
    maxRealms = 1000,
  ) {
    this.cache = new LRUCache<string, ServerInfo, Realm>({
      max: maxRealms,
      ttl: ttlMs,
      allowStale: true,
      noDeleteOnFetchRejection: true,
      allowStaleOnFetchRejection: true,
      fetchMethod: (_key, _stale, { context }) => this.load(context),
    });
  }

  async info(realm: Realm): Promise<ServerInfo> {
    // Stale data stands in for a failed refresh; with none, the failure itself is the answer
    // (E2: a silent upstream is a timeout, not "unavailable"), so lru-cache must not swallow it.
    const stale = this.cache.peek(realm.key, { allowStale: true }) !== undefined;
    const v = await this.cache.fetch(realm.key, { context: realm, allowStaleOnFetchRejection: stale });
    if (!v) throw upstreamUnavailable('server_settings gave no answer');
    return v;
  }

  async featureLevel(realm: Realm): Promise<number> {
    return (await this.info(realm)).featureLevel;
  }

  /** Primes the cache from a server_settings answer that passed through anyway. */
  observe(realm: Realm, settings: Record<string, unknown>): void {
    this.cache.set(realm.key, this.infoOf(settings));
  }

  /** Time of the last successful server_settings answer from any realm, for /readyz. */
  lastAnswerAt(): number {
    return this.lastSuccess;
  }

  private infoOf(settings: Record<string, unknown>): ServerInfo {
    this.lastSuccess = Date.now();
    return {
      featureLevel: featureLevelOf(settings),
      zulipVersion: typeof settings.zulip_version === 'string' ? settings.zulip_version : undefined,
      fetchedAt: this.lastSuccess,
    };
  }

  private async load(realm: Realm): Promise<ServerInfo> {
    const r = await this.client.fetch({
      realm,
      method: 'GET',
      path: '/api/v1/server_settings',
      headers: { accept: 'application/json', 'accept-encoding': 'identity' },
    });
    if (r.status < 200 || r.status >= 300) {
      this.log.warn({ realm: realm.host, status: r.status }, 'server_settings failed');
      throw upstreamBadResponse(`server_settings answered HTTP ${r.status}`);
    }
    const info = this.infoOf(parseJsonObject(r.body));
    this.log.debug({ realm: realm.host, featureLevel: info.featureLevel }, 'feature level detected');
    return info;
  }
}
