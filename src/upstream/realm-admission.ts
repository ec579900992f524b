import { LRUCache } from 'lru-cache';
import { ShimError } from '../http/errors.js';

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

export interface RealmAdmissionOptions {
  /** New realms admitted per minute, and as many at once (a token bucket of this size). */
  perMinute: number;
  /** Realm keys remembered as admitted (least recently used forgotten: a forgotten realm is new again). */
  maxKnown: number;
  now?: () => number;
  /** Called for each request refused. */
  onRefused?: () => void;
}

/**
 * X12: "new realms are admitted at a bounded rate". Every realm the shim keeps state for (a
 * ledger, snapshots, a user list) costs the upstream a realm's worth of fetches and the shim
 * its memory; a flood of Host names that each name a realm of their own (a server with a realm
 * per subdomain) must not turn into a flood of those. Known realms pass without cost; a new one
 * takes a token from a bucket that holds `perMinute` and refills at that rate; with none left,
 * the request is answered 503 with the seconds until the next token in Retry-After.
 */
export class RealmAdmission {
  private readonly known: LRUCache<string, true>;
  private readonly perMs: number;
  private readonly now: () => number;
  private tokens: number;
  private at: number;

  constructor(private readonly options: RealmAdmissionOptions) {
    this.known = new LRUCache({ max: options.maxKnown });
    this.perMs = options.perMinute / 60_000;
    this.now = options.now ?? Date.now;
    this.tokens = options.perMinute;
    this.at = this.now();
  }

  /** Passes a known realm; admits a new one if a token is left, else throws NewRealmsTooFastError. */
  admit(realmKey: string): void {
    if (this.known.get(realmKey)) return;
    const now = this.now();
    this.tokens = Math.min(this.options.perMinute, this.tokens + (now - this.at) * this.perMs);
    this.at = now;
    if (this.tokens < 1) {
      this.options.onRefused?.();
      throw new NewRealmsTooFastError(Math.max(1, Math.ceil((1 - this.tokens) / this.perMs / 1000)));
    }
    this.tokens -= 1;
    this.known.set(realmKey, true);
  }
}
