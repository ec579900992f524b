import { LRUCache } from 'lru-cache';
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
 * X2: what a ledger costs in this process, estimated from its user count (B5 measures about
 * 144 B a user: the entry, its map slot and the id) and a fixed part.
 */
export function ledgerBytes(state: LedgerState): number {
  return 1024 + 160 * state.users.size;
}

export interface MemoryStoreOptions {
  /** Realms kept at most. */
  maxRealms: number;
  /** X2: bytes the ledgers may take together (memory.ledgersBytes; see ledgerBytes). */
  maxBytes: number;
  /** Told once when a realm's ledger alone is larger than maxBytes (it cannot be kept). */
  onTooLarge?: ((realm: string, bytes: number, maxBytes: number) => void) | undefined;
}

/**
 * The default store: ledgers in this process, bounded in realms and in bytes (least recently
 * used evicted; an evicted realm starts again with a new epoch, so old ids get full data, P5).
 */
export class MemoryStore implements PresenceStore {
  readonly kind = 'memory' as const;
  private readonly ledgers: LRUCache<string, LedgerState>;
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
    this.ledgers = new LRUCache({ max: o.maxRealms, maxSize: this.maxBytes, sizeCalculation: ledgerBytes });
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
      const bytes = ledgerBytes(next);
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
  }
}
