import type { LRUCache } from 'lru-cache';
import { budgetedLru, type Footprint } from '../cache/budgeted.js';
import type { Logger } from '../observability/logger.js';
import { upstreamBadResponse, upstreamUnavailable } from '../http/errors.js';
import { endToEnd } from '../http/headers.js';
import { parseJsonObject, type BufferedResponse, type UpstreamClient } from './client.js';
import { isSuccess, UpstreamRefused, type Refused } from './relay.js';
import type { Realm } from './realm.js';

/**
 * The feature levels the shim's behaviour turns on, so code reads `level >= FL.LAST_UPDATE_ID`.
 * (User-object fields and endpoints name theirs in src/profile/ and src/register/users.ts.)
 */
export const FL = {
  /** Zulip 3.0: invisible mode (`presence_enabled`): the upstream may accept a report and drop it (P15). */
  INVISIBLE_MODE: 3,
  /** Zulip 3.0: `slim_presence` exists. */
  SLIM_PRESENCE: 25,
  /** One presence row per user (7.0 dev): slim presence is exact. */
  ONE_ROW_PER_USER: 178,
  /** Presence limited to the users a caller can access: callers may see different users. */
  PRESENCE_ACCESS_LIMIT: 228,
  /** The modern presence API: presence and register pass through untouched. */
  LAST_UPDATE_ID: 263,
} as const;

/**
 * The modern presence API's changes (feature level 263) by their names in the registry, which
 * declares them (changes/fl263-presence-last-update-id.ts): presence/, below the registry,
 * records them applied by these names.
 */
export const PRESENCE_CHANGES = {
  lastUpdateId: 'presence_last_update_id',
  modernFormat: 'presence_modern_format',
  historyLimitDays: 'presence_history_limit_days',
} as const;

/** `zulip_feature_level` of a server_settings answer; absent = 0 = Zulip 2.1. */
export function featureLevelOf(settings: Record<string, unknown>): number {
  const fl = settings.zulip_feature_level;
  return typeof fl === 'number' && Number.isInteger(fl) && fl >= 0 ? fl : 0;
}

export interface ServerInfo {
  featureLevel: number;
  /** X12: the realm the upstream serves for this Host (`realm_url`, before 9.0 `realm_uri`), normalised. */
  realmUrl?: string | undefined;
  /** The realm's name (`realm_name`), for the push relay's notifications (M7). */
  realmName?: string | undefined;
}

/** X12: the realm a request is for (its state's key), its feature level, and the realm's URL. */
export interface Resolved {
  realm: Realm;
  featureLevel: number;
  realmUrl?: string | undefined;
}

/** X12: the realm a server_settings answer names, lower-cased, without a trailing slash; undefined when it names none. */
export function realmUrlOf(settings: Record<string, unknown>): string | undefined {
  const url = settings.realm_url ?? settings.realm_uri;
  if (typeof url !== 'string' || url === '') return undefined;
  return url.toLowerCase().replace(/\/+$/, '');
}

export interface FeatureLevelOptions {
  /** How long a realm's answer is used before it is refreshed (in the background). */
  ttlMs: number;
  /**
   * X2: how long a server_settings the upstream refused (4xx: an unknown Host) is answered from
   * memory before the upstream is asked again (featureLevel.failureTtlMs).
   */
  failureTtlMs: number;
  /** X2: bytes for every realm's entry, failures included, least recently used evicted (memory.featureLevelsBytes). */
  maxBytes: number;
}

/** The cache is per Host (the realm it names is what server_settings tells). */
const hostKey = (realm: Realm) => `${realm.upstream}|${realm.host}`;

/** X2: what an entry holds: its key (a Host may be long), the realm it names, and a fixed part. */
const footprint = (key: string, realmUrl?: string, realmName?: string): Footprint => ({ fixed: 256, strings: [key, realmUrl, realmName] });
/**
 * A refusal's answer is remembered whole up to this size (Zulip's own is a line of JSON, a
 * front nginx's 404 page a few hundred bytes): a larger one (a full error page) is remembered as
 * the shim's E2 instead, so the upstream's pages cannot crowd the failures' budget (X2): about a
 * thousand refused Hosts fit in the default one with Zulip's own refusals.
 */
const REMEMBERED_BODY_BYTES = 1024;

/** Headers of a refusal that were the shim's own call's, not the caller's: its cookie, its date. */
const OWN_CALL_ONLY: ReadonlySet<string> = new Set(['set-cookie', 'date']);

/**
 * E1: a server_settings answer that is not a success, as the caller gets it: the upstream's
 * status, body and headers (a 503's Retry-After while the server is down for maintenance), but
 * for those of the shim's own call alone: a cookie set for it, its date.
 */
function refusalOf(r: BufferedResponse, message: string): UpstreamRefused {
  return new UpstreamRefused({ ...r, headers: endToEnd(r.headers, OWN_CALL_ONLY) }, message);
}

/** A remembered refusal holds the upstream's answer, relayed to each caller (E1): its bytes count too. */
const failureFootprint = (key: string, e: Error): Footprint => {
  // An Error of its own is about 500 bytes before any stack is read (measured).
  const f = { ...footprint(key), fixed: 512 };
  if (!(e instanceof UpstreamRefused)) return f;
  const headers = Object.entries(e.response.headers).flatMap(([k, v]) => [k, ...(Array.isArray(v) ? v : [String(v)])]);
  return { ...f, strings: [...(f.strings ?? []), ...headers], bytes: [e.response.body] };
};

/**
 * "The feature level of this realm": one cached, single-flight `GET /api/v1/server_settings`
 * per realm, refreshed in the background once stale, bounded in bytes (X2). A failure is
 * remembered too, so a made-up Host costs the upstream one call per failureTtlMs, not one per
 * request.
 */
export class FeatureLevels {
  private readonly cache: LRUCache<string, ServerInfo, Realm>;
  private readonly failures: LRUCache<string, Error>;

  /** Levels some realm was found below (firstFoundBelow). */
  private readonly foundBelow = new Set<number>();

  constructor(
    private readonly client: UpstreamClient,
    private readonly log: Logger,
    options: FeatureLevelOptions,
  ) {
    const { maxBytes } = options;
    this.cache = budgetedLru<string, ServerInfo, Realm>(maxBytes, (v, key) => footprint(key, v.realmUrl, v.realmName), {
      ttl: options.ttlMs,
      allowStale: true,
      noDeleteOnFetchRejection: true,
      allowStaleOnFetchRejection: true,
      fetchMethod: (_key, _stale, { context }) => this.load(context),
    });
    // Failures take a quarter of the budget at most: a flood of made-up hosts cannot evict the
    // real realms' answers.
    this.failures = budgetedLru<string, Error>(Math.max(1024, Math.floor(maxBytes / 4)), (v, key) => failureFootprint(key, v), {
      ttl: options.failureTtlMs,
    });
  }

  async info(realm: Realm): Promise<ServerInfo> {
    // Stale data stands in for a failed refresh; with none, the failure itself is the answer
    // (E2: a silent upstream is a timeout, not "unavailable"), so lru-cache must not swallow it.
    const key = hostKey(realm);
    const stale = this.cache.peek(key, { allowStale: true }) !== undefined;
    if (!stale) {
      const failed = this.failures.get(key);
      if (failed) throw failed;
    }
    const v = await this.cache.fetch(key, { context: realm, allowStaleOnFetchRejection: stale });
    if (!v) throw upstreamUnavailable('server_settings gave no answer');
    return v;
  }

  async featureLevel(realm: Realm): Promise<number> {
    return (await this.info(realm)).featureLevel;
  }

  /**
   * X12: the realm a request is for, and its feature level. Realm state (ledger, snapshots, user
   * list, lookups) is keyed by the realm the upstream says it serves for the request's Host, so
   * aliases of one realm share one state and one fetch stream, and a made-up Host on a one-realm
   * server costs this one small cached call, not a realm's worth. Requests to the upstream keep
   * the client's Host. Before state is kept for a realm new to the shim, it is admitted
   * (realm-admission.ts).
   */
  async resolve(hostRealm: Realm): Promise<Resolved | Refused> {
    let info: ServerInfo;
    try {
      info = await this.info(hostRealm);
    } catch (e) {
      // E1: the upstream refused the Host's server_settings: the caller gets that answer.
      if (e instanceof UpstreamRefused) return { refused: e.response };
      throw e;
    }
    const realm = info.realmUrl ? { ...hostRealm, key: `${hostRealm.upstream}|realm:${info.realmUrl}` } : hostRealm;
    return { realm, featureLevel: info.featureLevel, realmUrl: info.realmUrl };
  }

  /**
   * Whether this is the first time a realm of this upstream was found below `level` (one
   * server, one level: a warning about it is due once).
   */
  firstFoundBelow(level: number): boolean {
    if (this.foundBelow.has(level)) return false;
    this.foundBelow.add(level);
    return true;
  }

  /** Primes the cache from a server_settings answer that passed through anyway. */
  observe(realm: Realm, settings: Record<string, unknown>): void {
    this.failures.delete(hostKey(realm));
    this.cache.set(hostKey(realm), this.infoOf(settings));
  }

  /**
   * X13: an upstream answer showed a feature level above the one cached (the server was
   * upgraded while the shim runs): a known level is taken at once; `undefined` (the answer
   * only shows that the level rose) asks server_settings again on the next request.
   */
  raised(realm: Realm, featureLevel: number | undefined): void {
    const key = hostKey(realm);
    const cached = this.cache.peek(key, { allowStale: true });
    if (featureLevel === undefined) {
      this.cache.delete(key);
      this.log.info({ realm: realm.host }, 'the upstream answers as a newer server: its feature level is asked again');
    } else if (!cached || featureLevel > cached.featureLevel) {
      this.cache.set(key, { ...cached, featureLevel });
      this.log.info({ realm: realm.host, featureLevel, was: cached?.featureLevel }, 'the upstream now has a higher feature level');
    }
  }

  private infoOf(settings: Record<string, unknown>): ServerInfo {
    const name = settings.realm_name;
    return {
      featureLevel: featureLevelOf(settings),
      realmUrl: realmUrlOf(settings),
      realmName: typeof name === 'string' ? name : undefined,
    };
  }

  private async load(realm: Realm): Promise<ServerInfo> {
    const r = await this.client.fetch({
      realm,
      method: 'GET',
      path: '/api/v1/server_settings',
      headers: { accept: 'application/json', 'accept-encoding': 'identity' },
    });
    if (!isSuccess(r.status)) {
      const message = `server_settings answered HTTP ${r.status}`;
      // A redirect is not the caller's to follow (it would fetch server_settings in place of its
      // own call): the upstream URL is wrong, an error of the shim's (E2).
      const err = r.status < 400 ? upstreamBadResponse(message) : refusalOf(r, message);
      // X2: the upstream refused this Host (4xx, or a redirect): remembered, within the budget. A
      // 5xx, a rate limit (429), a request timeout (408) or no answer at all ends when it does:
      // the next request asks again.
      if (r.status < 500 && r.status !== 429 && r.status !== 408) {
        this.failures.set(hostKey(realm), r.body.length <= REMEMBERED_BODY_BYTES ? err : upstreamBadResponse(message));
      }
      this.log.warn({ realm: realm.host, status: r.status }, 'server_settings failed');
      throw err;
    }
    const info = this.infoOf(parseJsonObject(r.body));
    this.log.debug({ realm: realm.host, featureLevel: info.featureLevel }, 'feature level detected');
    return info;
  }
}
