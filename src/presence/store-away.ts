import { LRUCache } from 'lru-cache';

/**
 * S3: what a process remembers of the shared store's absences, per realm (realm keys, at most
 * REALMS each, a number apiece): which upstream answers it took in that no ledger holds, which
 * client ids it echoed with full data meanwhile, and which presences a register handed out as
 * they came. The answers it makes from these are in answers.ts and sharing.ts; the decisions in
 * plan.ts (`planDuringRefresh`, `planStoreAway`).
 */

const REALMS = 10_000;

export class StoreAwayState {
  /**
   * S3: realms whose ledger lacks an upstream answer this process took in while the store was
   * away, with that answer's server_timestamp (the newest such). No ledger copy answers a poll
   * of such a realm from its own until an answer at least as new is recorded.
   */
  private readonly unrecorded = new LRUCache<string, number>({ max: REALMS });
  /**
   * S3, X1: per realm, the largest client id this process echoed with full data while the store
   * was away (unvouched, the counter could not be raised to it). The counter is raised to it
   * before this process records anything there again (ledger-io.ts): an id above the counter that
   * ordinary merges passed later would be vouched for, and a delta from it would leave out what
   * was recorded in between. For an id the store had issued, that raise changes nothing.
   */
  private readonly echoed = new LRUCache<string, number>({ max: REALMS });
  /**
   * S3: per realm, the newest server_timestamp of presences a register answer gave a client as
   * the upstream sent them, while the store was away: no snapshot of the window holds them, and
   * one older than them is not answered from (sharing.ts `freshFor`).
   */
  private readonly handedOutAt = new LRUCache<string, number>({ max: REALMS });

  /** S3: an upstream answer of the realm, taken at `serverTimestamp`, could not be recorded (the store was away). */
  notRecorded(realm: string, serverTimestamp: number): void {
    this.unrecorded.set(realm, Math.max(serverTimestamp, this.unrecorded.get(realm) ?? Number.NEGATIVE_INFINITY));
  }

  /**
   * S3: an upstream answer of the realm, taken at `serverTimestamp`, is in its ledger now: it
   * holds everything up to then. One older than the missing one by more than `maxLateSeconds` is
   * the upstream's clock stepping back, which starts a new epoch anyway (X14).
   */
  recorded(realm: string, serverTimestamp: number, maxLateSeconds: number): void {
    const missing = this.unrecorded.get(realm);
    if (missing === undefined) return;
    if (serverTimestamp >= missing || serverTimestamp < missing - maxLateSeconds) this.unrecorded.delete(realm);
  }

  /** S3: whether the realm's ledger lacks an upstream answer this process took in (see `notRecorded`). */
  ledgerBehind(realm: string): boolean {
    return this.unrecorded.has(realm);
  }

  /** S3: a register answer gave a client the realm's presences as the upstream sent them at `serverTimestamp` (the store was away). */
  handedOut(realm: string, serverTimestamp: number): void {
    this.handedOutAt.set(realm, Math.max(serverTimestamp, this.handedOutAt.get(realm) ?? Number.NEGATIVE_INFINITY));
  }

  /** S3: whether a client may hold the realm's presences from an upstream answer newer than `serverTimestamp` (see `handedOut`). */
  handedOutAfter(realm: string, serverTimestamp: number): boolean {
    return (this.handedOutAt.get(realm) ?? Number.NEGATIVE_INFINITY) > serverTimestamp;
  }

  /** S3, X1: the client id `id` was echoed with full data while the store was away. */
  echoedWhileAway(realm: string, id: number): void {
    this.echoed.set(realm, Math.max(id, this.echoed.get(realm) ?? 0));
  }

  /** S3, X1: the id the realm's counter is owed (see `echoed`), taken: the caller raises it, or owes it again. */
  takeEchoed(realm: string): number | undefined {
    const id = this.echoed.get(realm);
    this.echoed.delete(realm);
    return id;
  }
}
