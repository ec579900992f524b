import type { LRUCache } from 'lru-cache';

/** The budgets of the shim's memory, by their configuration names (`memory.<name>Bytes`). */
export const BUDGET_NAMES = ['featureLevels', 'userDirectories', 'snapshots', 'answers', 'ledgers', 'lookups', 'callers'] as const;
export type BudgetName = (typeof BUDGET_NAMES)[number];

/** Where a budget takes part in the pool: the pool and the budget's name in it. */
export interface PoolPlace {
  pool: MemoryPool;
  budget: BudgetName;
}

/** A byte budget the pool can see and shrink: a budgeted cache, or the answers' ByteBudget. */
export interface PoolMember {
  /** Which budget of the configuration it is (several caches may share one, as featureLevels' answers and failures). */
  readonly budget: BudgetName;
  /** The budget's own bound. */
  readonly maxBytes: number;
  /** Bytes its entries are charged now. */
  usedBytes(): number;
  /** Lets its least recently used entry go, unless that is `keep`; false when there is none to let go. */
  evictOldest(keep?: unknown): boolean;
}

/**
 * X2: one cap over every byte budget of a shim (memory.totalBytes). Each budget is sized for the
 * largest realm it must hold, so together they allow far more than one realm needs; a flood of
 * mid-sized realms fills them all at once. The pool bounds their sum: past the cap, the budget
 * fullest for its size lets its least recently used entry go, so every kind shrinks in
 * proportion to its own budget, and one big realm still fits where the cap holds its parts.
 */
export class MemoryPool {
  private readonly members: PoolMember[] = [];
  private settling = false;

  constructor(readonly maxBytes: number) {}

  /** Where a budget of this name takes part in the pool. */
  in(budget: BudgetName): PoolPlace {
    return { pool: this, budget };
  }

  join(member: PoolMember): void {
    this.members.push(member);
  }

  /** Bytes every budget's entries are charged now. */
  usedBytes(): number {
    let used = 0;
    for (const m of this.members) used += m.usedBytes();
    return used;
  }

  /** Bytes charged now, by budget. */
  usedByBudget(): Map<BudgetName, number> {
    const used = new Map<BudgetName, number>();
    for (const m of this.members) used.set(m.budget, (used.get(m.budget) ?? 0) + m.usedBytes());
    return used;
  }

  /** Called after `member` kept `key`: lets entries go until the pool is within its cap, never that one. */
  settle(member: PoolMember, key: unknown): void {
    // An eviction's own callbacks may keep or drop entries: one settling at a time.
    if (this.settling) return;
    this.settling = true;
    try {
      const spent = new Set<PoolMember>();
      let used = this.usedBytes();
      while (used > this.maxBytes) {
        const fullest = this.fullest(spent);
        if (fullest === undefined) return;
        const before = fullest.usedBytes();
        if (fullest.evictOldest(fullest === member ? key : undefined)) used -= before - fullest.usedBytes();
        else spent.add(fullest);
      }
    } finally {
      this.settling = false;
    }
  }

  private fullest(spent: ReadonlySet<PoolMember>): PoolMember | undefined {
    let best: PoolMember | undefined;
    let bestShare = 0;
    for (const m of this.members) {
      if (spent.has(m)) continue;
      const share = m.usedBytes() / m.maxBytes;
      if (share > bestShare) {
        best = m;
        bestShare = share;
      }
    }
    return best;
  }
}

/** An lru-cache as a pool member: its least recently used settled entry goes first (loads in flight stay). */
export function lruMember<K extends {}, V extends {}, FC>(cache: LRUCache<K, V, FC>, budget: BudgetName): PoolMember {
  return {
    budget,
    maxBytes: cache.maxSize,
    usedBytes: () => cache.calculatedSize,
    evictOldest(keep) {
      for (const key of cache.rkeys()) {
        if (key === keep) continue;
        cache.delete(key);
        return true;
      }
      return false;
    },
  };
}
