import { LRUCache } from 'lru-cache';
import type { MemoryPool } from '../cache/memory-pool.js';
import { budgetedLru, bytesOf, type Footprint } from '../cache/budgeted.js';
import {
  applyChange,
  createLedger,
  type LedgerChange,
  type LedgerState,
  type Observation,
  type PreparedMerge,
} from '../presence/ledger.js';
import type { PresenceStore } from '../presence/ledger-store.js';

/**
 * X2: what a ledger holds in this process: a fixed part, its raised ranges (I6, 64 B each
 * counted) and its users (B5 measures 84 B a user at 10,000 users, 61 B at 100,000: the
 * entry's typed columns, 37 B, their shard's share of the arrays, and the delta index; 88 are
 * counted).
 */
export function ledgerFootprint(state: LedgerState): Footprint {
  return { fixed: 1024 + state.raised.length * 64, items: state.users.size, bytesPerItem: 88 };
}

export interface MemoryStoreOptions {
  /** Realms kept at most. */
  maxRealms: number;
  /** X2: bytes the ledgers may take together (memory.ledgersBytes; see ledgerFootprint). */
  maxBytes: number;
  /** X2: the shim's cap over all its budgets (memory.totalBytes; cache/memory-pool.ts). */
  pool?: MemoryPool | undefined;
  /** Told once when a realm's ledger alone is larger than maxBytes (it cannot be kept). */
  onTooLarge?: ((realm: string, bytes: number, maxBytes: number) => void) | undefined;
}

/** X12: realms remembered as taken on, per realm whose ledger may be kept (a realm key is a short string). */
const ADMITTED_PER_REALM = 4;

/**
 * The default store: ledgers in this process, bounded in realms and in bytes (least recently
 * used evicted; an evicted realm starts again with a new epoch, so old ids get full data, P5).
 * The realms taken on (X12) likewise, least recently used forgotten (a forgotten one is new again).
 */
export class MemoryStore implements PresenceStore {
  readonly kind = 'memory' as const;
  private readonly ledgers: LRUCache<string, LedgerState>;
  private readonly admitted: LRUCache<string, true>;
  /** The highest id any ledger of this store has issued: a new epoch starts above it (P5). */
  private highWater = 0;
  private readonly maxBytes: number;
  private onTooLarge: MemoryStoreOptions['onTooLarge'];

  constructor(
    o: MemoryStoreOptions,
    private readonly clock: () => number = Date.now,
  ) {
    this.maxBytes = o.maxBytes;
    this.onTooLarge = o.onTooLarge;
    this.ledgers = budgetedLru(this.maxBytes, ledgerFootprint, { max: o.maxRealms, pool: o.pool?.in('ledgers') });
    this.admitted = new LRUCache({ max: o.maxRealms * ADMITTED_PER_REALM });
  }

  async isAdmitted(realm: string): Promise<boolean> {
    return this.admitted.get(realm) === true;
  }

  async admit(realm: string): Promise<void> {
    this.admitted.set(realm, true);
  }

  async load(realm: string): Promise<LedgerState | undefined> {
    return this.ledgers.get(realm);
  }

  peek(realm: string): LedgerState | undefined {
    return this.ledgers.get(realm);
  }

  async merge(realm: string, observation: Observation, prepared?: PreparedMerge): Promise<LedgerState> {
    return this.apply(realm, { kind: 'observation', observation, prepared });
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
    if (next !== current) {
      const bytes = bytesOf(ledgerFootprint(next));
      if (bytes > this.maxBytes && this.onTooLarge) {
        // Not kept (every answer is then full data, P5): said once, with what to raise.
        this.onTooLarge(realm, bytes, this.maxBytes);
        this.onTooLarge = undefined;
      }
      this.ledgers.set(realm, next);
    }
    return next;
  }

  async ping(): Promise<void> {}

  async close(): Promise<void> {
    this.ledgers.clear();
    this.admitted.clear();
  }
}
