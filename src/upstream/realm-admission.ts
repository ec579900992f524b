import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';
import { LRUCache } from 'lru-cache';
import { apiPrefixOf } from '../http/api-prefix.js';
import { ShimError } from '../http/errors.js';
import type { Callers } from './callers.js';
import { forwardedHeaders, parseJsonObject, type BufferedResponse, type UpstreamClient } from './client.js';
import { FL } from './feature-level.js';
import type { Realm } from './realm.js';
import { isSuccess } from './relay.js';

/** X12: a realm the shim has not kept state for arrived faster than new realms are admitted. */
export class NewRealmsTooFastError extends ShimError {
  constructor(retryAfterSeconds: number) {
    super(
      503,
      'UPSTREAM_UNAVAILABLE',
      'zulip-compat-shim is taking on many new organisations at once; try again shortly',
      retryAfterSeconds,
    );
  }
}

/**
 * X12: where the realms taken on are remembered: the store, with the rest of realm state (in
 * this process, or in Redis for every replica and across restarts, S1). Keys are realm keys.
 */
export interface AdmittedRealms {
  /** Whether the realm was taken on, by this process or another on the same store (and keeps it remembered). */
  isAdmitted(realm: string): Promise<boolean>;
  /** Remembers the realm as taken on. */
  admit(realm: string): Promise<void>;
}

export interface RealmAdmissionOptions {
  /** New realms taken on per minute by this process, and as many at once (a token bucket of this size). */
  perMinute: number;
  /** A client address's own share of them: new realms per minute, and as many at once. */
  perAddressPerMinute: number;
  /** Where admitted realms are remembered (the store). */
  admitted: AdmittedRealms;
  /** The client address a request counts against: its peer, or the client a trusted proxy names (X4). */
  addressOf: (req: IncomingMessage) => string;
  /** The one HTTP client, for the caller's GET …/users/me that checks its credentials. */
  client: UpstreamClient;
  /** Where the caller that check found is kept, so the presence poll's own lookup of it (P15) asks no second time. */
  callers: Callers;
  /** Realm keys this process remembers as admitted without asking the store (least recently used forgotten). */
  maxKnown: number;
  /** Client addresses whose shares are tracked at once (one idle for a minute has its whole share again). */
  maxAddresses?: number;
  now?: () => number;
  /** Called for each request refused. */
  onRefused?: () => void;
}

/** How often (ms) a realm this process knows is marked again in the store, so the store keeps it while it is used. */
const MARK_AGAIN_MS = 3_600_000;
/** @default 10,000 addresses: about a megabyte. */
const MAX_ADDRESSES = 10_000;

/** A token bucket of `size` tokens refilled at `size` a minute. */
class MinuteBucket {
  private tokens: number;
  private at: number;

  constructor(
    private readonly size: number,
    now: number,
  ) {
    this.tokens = size;
    this.at = now;
  }

  /** Milliseconds until a token is there (refilled up to `now` first); 0 when one is. */
  msUntilToken(now: number): number {
    this.tokens = Math.min(this.size, this.tokens + ((now - this.at) * this.size) / 60_000);
    this.at = now;
    return this.tokens >= 1 ? 0 : ((1 - this.tokens) * 60_000) / this.size;
  }

  take(): void {
    this.tokens -= 1;
  }
}

/**
 * X12: "new realms are admitted at a bounded rate". Every realm the shim keeps state for (a
 * ledger, snapshots, a user list) costs the upstream a realm's worth of fetches and the shim
 * its memory; Host names that each name a realm of their own (a server with a realm per
 * subdomain) must not turn into a flood of those.
 *
 * A realm is taken on only once the upstream has accepted a caller's credentials for it, so
 * requests without valid credentials cost nothing shared, however many Host names they make
 * up: they are answered with the upstream's refusal and take no token. A realm taken on is
 * remembered in the store, so a restart or another replica on the same store does not charge
 * it again. New realms take a token from a bucket of `perMinute` (per process) and one from the
 * client address's own bucket of `perAddressPerMinute`, so one address cannot spend them all;
 * with none left in either, the request is answered 503 with the seconds until the next token
 * in Retry-After. Realms on the modern presence API (feature level 263) keep no state and pass.
 */
export class RealmAdmission {
  /** Realm key → when this process last marked it in the store. */
  private readonly known: LRUCache<string, number>;
  private readonly everyone: MinuteBucket;
  private readonly addresses: LRUCache<string, MinuteBucket>;
  private readonly now: () => number;

  constructor(private readonly options: RealmAdmissionOptions) {
    this.now = options.now ?? Date.now;
    this.known = new LRUCache({ max: options.maxKnown });
    this.everyone = new MinuteBucket(options.perMinute, this.now());
    // A minute after its last take an address has its whole share again: forgetting it then changes nothing.
    this.addresses = new LRUCache({ max: options.maxAddresses ?? MAX_ADDRESSES, ttl: 60_000 });
  }

  /**
   * Presence and register: the realm goes on when it keeps no state or is known; a new one once
   * the upstream accepts the caller's credentials for it, asked with the caller's own
   * `GET …/users/me` (the cheapest call that checks them, and one without effect upstream)
   * before anything is kept for the realm. Returns the upstream's refusal of the caller, its to
   * get (E1); undefined once the realm may keep state. Throws NewRealmsTooFastError past the rate.
   */
  async admitCaller(req: IncomingMessage, realm: Realm, featureLevel: number): Promise<BufferedResponse | undefined> {
    if (featureLevel >= FL.LAST_UPDATE_ID || (await this.isAdmitted(realm.key))) return undefined;
    const address = shareOf(this.options.addressOf(req));
    this.room(address); // no room: the upstream is not asked
    const path = `${apiPrefixOf(req.url)}/users/me`;
    const me = await this.options.client.fetch({ realm, method: 'GET', path, headers: forwardedHeaders(req) });
    if (!isSuccess(me.status)) return me;
    await this.take(realm.key, address);
    try {
      this.options.callers.remember(realm, req.headers, parseJsonObject(me.body));
    } catch {
      // Accepted all the same; the caller is looked up again where it is needed.
    }
    return undefined;
  }

  /**
   * The user-object endpoints: the caller's own call (a GET, without effect upstream) came
   * first and the upstream accepted it; the realm is taken on now if new. Throws
   * NewRealmsTooFastError past the rate.
   */
  async accepted(req: IncomingMessage, realm: Realm, featureLevel: number): Promise<void> {
    if (featureLevel >= FL.LAST_UPDATE_ID || (await this.isAdmitted(realm.key))) return;
    const address = shareOf(this.options.addressOf(req));
    this.room(address);
    await this.take(realm.key, address);
  }

  /**
   * Whether the realm is taken on: known to this process, else to the store (another replica,
   * an earlier process). A store that cannot answer counts as not knowing it: the realm is then
   * taken on again, after its caller's credentials, within the rate.
   */
  async isAdmitted(realmKey: string): Promise<boolean> {
    const now = this.now();
    const marked = this.known.get(realmKey);
    if (marked !== undefined) {
      if (now - marked > MARK_AGAIN_MS) {
        this.known.set(realmKey, now);
        this.options.admitted.admit(realmKey).catch(() => undefined); // the store counts its own errors
      }
      return true;
    }
    const stored = await this.options.admitted.isAdmitted(realmKey).catch(() => false);
    if (stored) this.known.set(realmKey, now);
    return stored;
  }

  /** Throws NewRealmsTooFastError unless both buckets, the process's and the address's, have a token. */
  private room(address: string): void {
    const now = this.now();
    const waitMs = Math.max(this.everyone.msUntilToken(now), this.addresses.get(address)?.msUntilToken(now) ?? 0);
    if (waitMs === 0) return;
    this.options.onRefused?.();
    throw new NewRealmsTooFastError(Math.max(1, Math.ceil(waitMs / 1000)));
  }

  /** Takes the realm on: a token from each bucket (checked again: others may have taken the last meanwhile). */
  private async take(realmKey: string, address: string): Promise<void> {
    if (this.known.has(realmKey)) return; // another request of the realm took it on meanwhile
    this.room(address);
    const now = this.now();
    const share = this.addresses.get(address) ?? new MinuteBucket(this.options.perAddressPerMinute, now);
    this.everyone.take();
    share.take();
    this.addresses.set(address, share); // its minute counts from this take
    this.known.set(realmKey, now);
    await this.options.admitted.admit(realmKey).catch(() => undefined); // kept in this process all the same
  }
}

/**
 * The share a client address counts against: an IPv4 address (also one mapped into IPv6) on its
 * own, an IPv6 address by its /64, the block a single subscriber is given. Pure.
 */
export function shareOf(address: string): string {
  const plain = address.replace(/%.*$/, ''); // a zone index
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(plain);
  if (mapped) return mapped[1]!;
  if (isIP(plain) !== 6) return plain;
  const groups = (part: string) => (part === '' ? [] : part.split(':').flatMap((g) => (g.includes('.') ? ['0', '0'] : [g])));
  const [head = '', tail] = plain.split('::');
  const front = groups(head);
  const back = tail === undefined ? [] : groups(tail);
  const all = [...front, ...Array<string>(Math.max(0, 8 - front.length - back.length)).fill('0'), ...back];
  return `${all
    .slice(0, 4)
    .map((g) => Number.parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}
