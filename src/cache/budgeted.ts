import { LRUCache } from 'lru-cache';
import { joinPool, type PoolHooks, type PoolPlace } from './memory-pool.js';

/**
 * X2: the one way a bounded cache sizes what it keeps. An entry's cost is estimated from what it
 * holds, never by walking it (a user list is megabytes), by one rule for every kind of part:
 * the figure is never below the characters and bytes the entry names, plus its fixed part.
 */
export interface Footprint {
  /** The cache's slot and the entry's own objects, measured per kind of entry. */
  fixed: number;
  /**
   * Strings it holds (its key too), at two bytes a character: V8 keeps a string in one byte a
   * character, or two as soon as one character is past U+00FF (a single Chinese name in a
   * joined user list makes the whole list two-byte).
   */
  strings?: ReadonlyArray<string | undefined>;
  /** Strings known to hold no character past U+00FF, which V8 keeps at one byte a character. */
  oneByteStrings?: ReadonlyArray<string | undefined>;
  /** Buffers and typed-array columns it holds, at their byteLength. */
  bytes?: ReadonlyArray<{ readonly byteLength: number } | undefined>;
  /** Entries of a map or table it holds (`items`), each at a measured `bytesPerItem`. */
  items?: number | undefined;
  bytesPerItem?: number;
  /** Bytes it takes on after it is kept (lru-cache sizes an entry once, when it is set). */
  later?: number;
  /** Values it holds that have a footprint of their own. */
  inner?: ReadonlyArray<Footprint | undefined>;
}

/** Bytes of a footprint: a whole number, at least 1 (as lru-cache wants a size). */
export function bytesOf(f: Footprint): number {
  return Math.max(1, Math.ceil(sum(f)));
}

function sum(f: Footprint): number {
  let n = f.fixed + (f.items ?? 0) * (f.bytesPerItem ?? 0) + (f.later ?? 0);
  for (const s of f.strings ?? []) if (s !== undefined) n += 2 * s.length;
  for (const s of f.oneByteStrings ?? []) if (s !== undefined) n += s.length;
  for (const b of f.bytes ?? []) if (b !== undefined) n += b.byteLength;
  for (const i of f.inner ?? []) if (i !== undefined) n += sum(i);
  return n;
}

/** lru-cache's options but its size ones, which budgetedLru sets, and the pool the budget is part of. */
export type BudgetedLruOptions<K extends {}, V extends {}, FC> = Omit<
  LRUCache.OptionsBase<K, V, FC>,
  'maxSize' | 'sizeCalculation' | 'maxEntrySize' | 'onInsert'
> & {
  /** Its place in the shim's cap over all its budgets (memory.totalBytes): past the cap, entries go here too. */
  pool?: PoolPlace | undefined;
};

/**
 * An lru-cache bounded by `maxBytes` (X2), each entry sized by its footprint when it is set; an
 * entry larger than the whole budget is not kept. In a pool, each entry kept may let the entries
 * used longest ago go, in this budget or another (memory-pool.ts), never itself. A fetch whose
 * entry is evicted while it loads (a full budget, other loads finishing first) still answers its
 * callers with what it loaded: lru-cache would otherwise reject them all with "evicted".
 */
export function budgetedLru<K extends {}, V extends {}, FC = unknown>(
  maxBytes: number,
  footprint: (value: V, key: K) => Footprint,
  { pool, ...options }: BudgetedLruOptions<K, V, FC> = {},
): LRUCache<K, V, FC> {
  let hooks: PoolHooks<K> | undefined;
  const cache: LRUCache<K, V, FC> = new LRUCache<K, V, FC>({
    ...(options.fetchMethod && { ignoreFetchAbort: true }),
    ...options,
    maxSize: maxBytes,
    sizeCalculation: (value, key) => bytesOf(footprint(value, key)),
    ...(pool && {
      onInsert: (_value, key) => hooks?.inserted(key),
      // A value replaced in place is disposed of before its successor is inserted (and stamped).
      dispose: (value, key, reason) => {
        hooks?.removed(key);
        options.dispose?.(value, key, reason);
      },
    }),
  });
  if (pool) hooks = joinPool(cache, pool);
  return cache;
}
