import { LRUCache } from 'lru-cache';
import { applyChange, createLedger, type LedgerChange, type LedgerState, type Observation } from '../presence/ledger.js';
import type { PresenceStore } from './types.js';

/**
 * The default store: ledgers in this process, at most `maxRealms` of them (least recently
 * used evicted; an evicted realm starts again with a new epoch, so old ids get full data, P5).
 */
export class MemoryStore implements PresenceStore {
  readonly kind = 'memory' as const;
  private readonly ledgers: LRUCache<string, LedgerState>;
  /** The highest id any ledger of this store has issued: a new epoch starts above it (P5). */
  private highWater = 0;

  constructor(
    maxRealms: number,
    private readonly clock: () => number = Date.now,
  ) {
    this.ledgers = new LRUCache({ max: maxRealms });
  }

  async load(realm: string): Promise<LedgerState | undefined> {
    return this.ledgers.get(realm);
  }

  peek(realm: string): LedgerState | undefined {
    return this.ledgers.get(realm);
  }

  async merge(realm: string, observation: Observation): Promise<LedgerState> {
    return this.apply(realm, { kind: 'observation', observation });
  }

  async raiseCounter(realm: string, atLeast: number): Promise<LedgerState> {
    return this.apply(realm, { kind: 'counter', atLeast });
  }

  /** Synchronous read-change-write: nothing else runs in between on this thread (I7). */
  private apply(realm: string, change: LedgerChange): LedgerState {
    const now = this.clock();
    const current = this.ledgers.get(realm);
    const next = applyChange(current ?? createLedger(now, this.highWater), change, now);
    this.highWater = Math.max(this.highWater, next.lastId);
    if (next !== current) this.ledgers.set(realm, next);
    return next;
  }

  /** Forgets a realm, as an eviction or a restart would. */
  evict(realm: string): void {
    this.ledgers.delete(realm);
  }

  async ping(): Promise<void> {}

  async close(): Promise<void> {
    this.ledgers.clear();
  }
}
