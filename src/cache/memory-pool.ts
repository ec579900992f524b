import type { LRUCache } from 'lru-cache';

/**
 * The budgets in the pool, by their configuration names (`memory.<name>Bytes`): those of realms
 * taken on. featureLevels stays apart: it is filled before any credential is checked (X12).
 */
export const BUDGET_NAMES = ['userDirectories', 'snapshots', 'answers', 'ledgers', 'lookups', 'callers'] as const;
export type BudgetName = (typeof BUDGET_NAMES)[number];

/** Where a budget takes part in the pool: the pool and the budget's name in it. */
export interface PoolPlace {
  pool: MemoryPool;
  budget: BudgetName;
}

/** A byte budget the pool can see and shrink: a budgeted cache, or the answers' ByteBudget. */
export interface PoolMember {
  /** Which budget of the configuration it is. */
  readonly budget: BudgetName;
  /** Bytes its entries are charged now. */
  usedBytes(): number;
  /** When its least recently used entry but `keep` was last used, on the pool's clock; undefined when it has none. */
  oldestUse(keep?: unknown): number | undefined;
  /** Lets that entry go. */
  evictOldest(keep?: unknown): void;
}

/**
 * X2: one cap over the byte budgets of realms taken on (memory.totalBytes). Each budget is sized for the
 * largest realm it must hold, so together they allow far more than one realm needs; a flood of
 * mid-sized realms fills them all at once. The pool bounds their sum: past the cap, the entry
 * used longest ago goes, whichever budget holds it, as if the budgets were one (a realm visited
 * long ago loses its parts first, a realm in use keeps them).
 */
export class MemoryPool {
  private readonly members: PoolMember[] = [];
  private settling = false;
  private clock = 0;

  constructor(readonly maxBytes: number) {}

  /** Where a budget of this name takes part in the pool. */
  in(budget: BudgetName): PoolPlace {
    return { pool: this, budget };
  }

  join(member: PoolMember): void {
    this.members.push(member);
  }

  /** The pool's clock: members stamp each use of an entry with it. */
  now(): number {
    return ++this.clock;
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
      let used = this.usedBytes();
      while (used > this.maxBytes) {
        const victim = this.oldest(member, key);
        if (victim === undefined) return;
        const before = victim.usedBytes();
        victim.evictOldest(victim === member ? key : undefined);
        used -= before - victim.usedBytes();
      }
    } finally {
      this.settling = false;
    }
  }

  /** The member whose least recently used entry (not the one just kept) was used longest ago. */
  private oldest(member: PoolMember, key: unknown): PoolMember | undefined {
    let victim: PoolMember | undefined;
    let oldest = Number.POSITIVE_INFINITY;
    for (const m of this.members) {
      const at = m.oldestUse(m === member ? key : undefined);
      if (at !== undefined && at < oldest) {
        victim = m;
        oldest = at;
      }
    }
    return victim;
  }
}

/** What a budgeted cache tells its pool member (budgeted.ts wires them as lru-cache's onInsert and dispose). */
export interface PoolHooks<K> {
  /** A key kept: stamped, and the pool settled. */
  inserted(key: K): void;
  /** A key let go, for any reason: its stamp forgotten. */
  removed(key: K): void;
}

/**
 * Makes an lru-cache a pool member: each set, get and fetch of a key stamps it with the pool's
 * clock (as lru-cache moves it to the front), so the pool can compare its oldest entry with
 * other budgets'. Loads in flight are not entries yet and never go.
 */
export function joinPool<K extends {}, V extends {}, FC>(cache: LRUCache<K, V, FC>, place: PoolPlace): PoolHooks<K> {
  const { pool } = place;
  const used = new Map<K, number>();
  const get = cache.get.bind(cache);
  const fetch = cache.fetch.bind(cache) as (key: K, options?: unknown) => Promise<V | undefined>;
  cache.get = (key, options) => {
    const value = get(key, options);
    if (value !== undefined) used.set(key, pool.now());
    return value;
  };
  const stampedFetch = (key: K, options?: unknown) => {
    if (used.has(key)) used.set(key, pool.now());
    return fetch(key, options);
  };
  cache.fetch = stampedFetch as typeof cache.fetch;
  const oldestKey = (keep: unknown): K | undefined => {
    for (const key of cache.rkeys()) if (key !== keep) return key;
    return undefined;
  };
  const member: PoolMember = {
    budget: place.budget,
    usedBytes: () => cache.calculatedSize,
    oldestUse(keep) {
      const key = oldestKey(keep);
      return key === undefined ? undefined : (used.get(key) ?? 0);
    },
    evictOldest(keep) {
      const key = oldestKey(keep);
      if (key !== undefined) cache.delete(key);
    },
  };
  pool.join(member);
  return {
    inserted(key) {
      used.set(key, pool.now());
      pool.settle(member, key);
    },
    removed(key) {
      used.delete(key);
    },
  };
}
