import type { LRUCache } from 'lru-cache';
import type { PoolPlace } from './memory-pool.js';
import { budgetedLru, type Footprint } from './budgeted.js';

/**
 * Where a SharedCache keeps values for other replicas (S1): JSON text with a time to live.
 * Implemented on Redis (store/redis-cache.ts); a store without one keeps caches per process.
 */
export interface CacheBackend {
  /** The value and its remaining time to live, or undefined when absent. */
  get(key: string): Promise<{ json: string; ttlMs: number } | undefined>;
  set(key: string, json: string, ttlMs: number): Promise<void>;
  delete(key: string): Promise<void>;
}

export interface SharedCacheOptions<V, C> {
  /** Names the cache in shared keys and in the lookup metric: `user_directory`, `own_profile`. */
  name: string;
  /** How long a value is used before it is loaded again. */
  ttlMs: number;
  /** Values kept in this process at most (least recently used go first). */
  max: number;
  /** X2: bytes the values of this process may take (each sized by its footprint); least recently used go first. */
  maxBytes: number;
  /** X2: the shim's cap over all its budgets (memory.totalBytes; cache/memory-pool.ts). */
  pool?: PoolPlace | undefined;
  /** X2: what a value and its key hold (budgeted.ts). */
  footprint: (value: V, key: string) => Footprint;
  /**
   * A value past its ttlMs is still answered while it is loaded again in the background (a
   * failed reload keeps it), so no caller waits for a reload of something it already has.
   */
  staleWhileRevalidate?: boolean | undefined;
  /** How a value is written for other replicas. Default: JSON.stringify. */
  toJson?: ((value: V) => string) | undefined;
  /** …and read back (may throw: the value is then loaded from its source). Default: JSON.parse. */
  fromJson?: ((json: string) => Promise<V> | V) | undefined;
  /**
   * Reads a value at its source (the upstream) when neither this process nor the backend has
   * it; `context` carries what the read needs (the caller's headers) and is never stored.
   */
  load(key: string, context: C): Promise<V>;
  /** Shared with other replicas through this backend; absent: this process only. */
  backend?: CacheBackend | undefined;
  /** Counts hits and misses by cache name. */
  lookups?: { inc(labels: { cache: string; result: 'hit' | 'miss' }): void } | undefined;
}

/**
 * A lookup cache: this process first (bounded, single flight: concurrent gets of one key wait
 * for one load), then the shared backend, then the source. Values must survive
 * JSON.stringify/parse, or toJson/fromJson. Keys name what is looked up (a realm, a realm and user id), never a
 * credential (P13).
 */
export class SharedCache<V extends {}, C = undefined> {
  /** The context is typed C at get() and fill(); lru-cache's own typing of it is not needed. */
  private readonly local: LRUCache<string, V, unknown>;

  constructor(private readonly o: SharedCacheOptions<V, C>) {
    this.local = budgetedLru<string, V, unknown>(o.maxBytes, o.footprint, {
      max: o.max,
      pool: o.pool,
      ttl: o.ttlMs,
      ...(o.staleWhileRevalidate ? { allowStale: true, noDeleteOnFetchRejection: true } : {}),
      fetchMethod: (key, _stale, { context, options }) => this.fill(key, context as C, options),
    });
  }

  async get(key: string, context: C): Promise<V> {
    const status: LRUCache.Status<string, V, unknown> = {};
    // A failed reload keeps a stale value; with none, the failure is the answer.
    const stale = this.o.staleWhileRevalidate === true && this.local.peek(key, { allowStale: true }) !== undefined;
    const v = await this.local.fetch(key, { context, status, allowStaleOnFetchRejection: stale });
    // A get that started a fill is counted there (hit in the backend or a load); the rest here.
    if (status.fetch !== 'miss' && status.fetch !== 'refresh') this.o.lookups?.inc({ cache: this.o.name, result: 'hit' });
    if (v === undefined) throw new Error(`${this.o.name}: no value for ${key}`);
    return v;
  }

  /** Replaces a value here and for every replica (after a change the shim made itself). */
  async set(key: string, value: V): Promise<void> {
    this.local.set(key, value);
    await this.o.backend?.set(this.sharedKey(key), this.toJson(value), this.o.ttlMs).catch(() => {});
  }

  /** Forgets a value here and for every replica. */
  async delete(key: string): Promise<void> {
    this.local.delete(key);
    await this.o.backend?.delete(this.sharedKey(key)).catch(() => {});
  }

  private toJson(value: V): string {
    return this.o.toJson ? this.o.toJson(value) : JSON.stringify(value);
  }

  private sharedKey(key: string): string {
    return `${this.o.name}:${key}`;
  }

  private async fill(key: string, context: C, options: LRUCache.FetcherFetchOptions<string, V, unknown>): Promise<V> {
    const backend = this.o.backend;
    // A backend that fails is skipped: lookups still work, from the source (S1).
    const shared = backend ? await backend.get(this.sharedKey(key)).catch(() => undefined) : undefined;
    if (shared) {
      try {
        const v = this.o.fromJson ? await this.o.fromJson(shared.json) : (JSON.parse(shared.json) as V);
        options.ttl = Math.min(shared.ttlMs, this.o.ttlMs); // expire with the shared copy
        this.o.lookups?.inc({ cache: this.o.name, result: 'hit' });
        return v;
      } catch {
        // not readable (written by something else): load it again
      }
    }
    const v = await this.o.load(key, context);
    this.o.lookups?.inc({ cache: this.o.name, result: 'miss' });
    if (backend) await backend.set(this.sharedKey(key), this.toJson(v), this.o.ttlMs).catch(() => {});
    return v;
  }
}
