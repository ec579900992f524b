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
}

export interface FeatureLevelOptions {
  /** How long a realm's answer is used before it is refreshed (in the background). */
  ttlMs: number;
  /**
   * X2: how long a server_settings the upstream refused (4xx: an unknown Host) is answered from
   * memory before the upstream is asked again.
   * @default 30000
   */
  failureTtlMs?: number;
  /**
   * X2: bytes for every realm's entry, failures included (least recently used evicted).
   * @default 4 MiB
   */
  maxBytes?: number;
}

/** X2: what an entry costs, estimated from its key (a Host may be long) and a fixed part. */
const entryBytes = (key: string) => 256 + 2 * key.length;

/**
 * "The feature level of this realm": one cached, single-flight `GET /api/v1/server_settings`
 * per realm, refreshed in the background once stale, bounded in bytes (X2). A failure is
 * remembered too, so a made-up Host costs the upstream one call per failureTtlMs, not one per
 * request.
 */
export class FeatureLevels {
  private readonly cache: LRUCache<string, ServerInfo, Realm>;
  private readonly failures: LRUCache<string, Error>;

  constructor(
    private readonly client: UpstreamClient,
    private readonly log: Logger,
    options: FeatureLevelOptions,
  ) {
    const maxBytes = options.maxBytes ?? 4 * 1024 * 1024;
    this.cache = new LRUCache<string, ServerInfo, Realm>({
      maxSize: maxBytes,
      sizeCalculation: (_v, key) => entryBytes(key),
      ttl: options.ttlMs,
      allowStale: true,
      noDeleteOnFetchRejection: true,
      allowStaleOnFetchRejection: true,
      fetchMethod: (_key, _stale, { context }) => this.load(context),
    });
    // Failures take a quarter of the budget at most: a flood of made-up hosts cannot evict the
    // real realms' answers.
    this.failures = new LRUCache<string, Error>({
      maxSize: Math.max(1024, Math.floor(maxBytes / 4)),
      sizeCalculation: (_v, key) => entryBytes(key),
      ttl: options.failureTtlMs ?? 30_000,
    });
  }

  async info(realm: Realm): Promise<ServerInfo> {
    // Stale data stands in for a failed refresh; with none, the failure itself is the answer
    // (E2: a silent upstream is a timeout, not "unavailable"), so lru-cache must not swallow it.
    const stale = this.cache.peek(realm.key, { allowStale: true }) !== undefined;
    if (!stale) {
      const failed = this.failures.get(realm.key);
      if (failed) throw failed;
    }
    const v = await this.cache.fetch(realm.key, { context: realm, allowStaleOnFetchRejection: stale });
    if (!v) throw upstreamUnavailable('server_settings gave no answer');
    return v;
  }

  async featureLevel(realm: Realm): Promise<number> {
    return (await this.info(realm)).featureLevel;
  }

  /** Primes the cache from a server_settings answer that passed through anyway. */
  observe(realm: Realm, settings: Record<string, unknown>): void {
    this.failures.delete(realm.key);
    this.cache.set(realm.key, this.infoOf(settings));
  }

  /**
   * X13: an upstream answer showed a feature level above the one cached (the server was
   * upgraded while the shim runs): a known level is taken at once; `undefined` (the answer
   * only shows that the level rose) asks server_settings again on the next request.
   */
  raised(realm: Realm, featureLevel: number | undefined): void {
    const cached = this.cache.peek(realm.key, { allowStale: true });
    if (featureLevel === undefined) {
      this.cache.delete(realm.key);
      this.log.info({ realm: realm.host }, 'the upstream answers as a newer server: its feature level is asked again');
    } else if (!cached || featureLevel > cached.featureLevel) {
      this.cache.set(realm.key, { featureLevel });
      this.log.info({ realm: realm.host, featureLevel, was: cached?.featureLevel }, 'the upstream now has a higher feature level');
    }
  }

  private infoOf(settings: Record<string, unknown>): ServerInfo {
    return { featureLevel: featureLevelOf(settings) };
  }

  private async load(realm: Realm): Promise<ServerInfo> {
    const r = await this.client.fetch({
      realm,
      method: 'GET',
      path: '/api/v1/server_settings',
      headers: { accept: 'application/json', 'accept-encoding': 'identity' },
    });
    if (r.status < 200 || r.status >= 300) {
      const err = upstreamBadResponse(`server_settings answered HTTP ${r.status}`);
      // X2: the upstream refused this Host (4xx): remembered. A 5xx or no answer at all is a
      // fault of the upstream that ends when it does, so the next request asks again.
      if (r.status < 500) this.failures.set(realm.key, err);
      this.log.warn({ realm: realm.host, status: r.status }, 'server_settings failed');
      throw err;
    }
    const info = this.infoOf(parseJsonObject(r.body));
    this.log.debug({ realm: realm.host, featureLevel: info.featureLevel }, 'feature level detected');
    return info;
  }
}
