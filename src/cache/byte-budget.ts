import { LRUCache } from 'lru-cache';
import { bytesOf, type Footprint } from './budgeted.js';
import type { MemoryPool, PoolMember, PoolPlace } from './memory-pool.js';

/**
 * X2: one byte budget shared by many small maps (the answers built from each presence
 * snapshot): past it, the entries used longest ago go, whichever map holds them. Each map is a
 * real Map, so code that caches in a Map needs no change beyond where the map is made.
 */
export class ByteBudget {
  /** Weak: a map nobody holds any more (its snapshot was dropped) is collected with its entries. */
  private readonly entries: LRUCache<number, { map: WeakRef<BudgetedMap<unknown, unknown>>; key: unknown }>;
  /** …and its entries are then given back to the budget. */
  private readonly collected = new FinalizationRegistry<Map<unknown, number>>((tickets) => {
    for (const ticket of tickets.values()) this.entries.delete(ticket);
  });
  private next = 0;
  private readonly pool: MemoryPool | undefined;
  private readonly member: PoolMember;
  /** In a pool: when each entry was last used, on the pool's clock. */
  private readonly used = new Map<number, number>();

  /** `place`: its place in the shim's cap over all its budgets (memory.totalBytes), which may let entries go here too. */
  constructor(
    readonly maxBytes: number,
    place?: PoolPlace,
  ) {
    this.entries = new LRUCache({
      maxSize: maxBytes,
      dispose: ({ map, key }, ticket, reason) => {
        this.used.delete(ticket);
        if (reason !== 'delete') map.deref()?.forget(key);
      },
    });
    this.member = {
      budget: place?.budget ?? 'answers',
      usedBytes: () => this.entries.calculatedSize,
      oldestUse: (keep) => {
        const ticket = this.oldestTicket(keep);
        return ticket === undefined ? undefined : (this.used.get(ticket) ?? 0);
      },
      evictOldest: (keep) => {
        const ticket = this.oldestTicket(keep);
        if (ticket === undefined) return;
        const entry = this.entries.peek(ticket);
        this.release(ticket);
        entry?.map.deref()?.forget(entry.key);
      },
    };
    this.pool = place?.pool;
    this.pool?.join(this.member);
  }

  /** A map whose entries count against this budget, each sized by its footprint when it is set. */
  map<K, V>(footprint: (value: V) => Footprint): BudgetedMap<K, V> {
    const tickets = new Map<K, number>();
    const map = new BudgetedMap<K, V>(this, footprint, tickets);
    this.collected.register(map, tickets as Map<unknown, number>);
    return map;
  }

  /** Bytes the entries take now. */
  get usedBytes(): number {
    return this.entries.calculatedSize;
  }

  /** @internal */
  charge(map: BudgetedMap<unknown, unknown>, key: unknown, bytes: number): number {
    const ticket = ++this.next;
    this.entries.set(ticket, { map: new WeakRef(map), key }, { size: bytes });
    if (this.pool) {
      this.used.set(ticket, this.pool.now());
      this.pool.settle(this.member, ticket);
    }
    return ticket;
  }

  /** @internal */
  touch(ticket: number): void {
    if (this.entries.get(ticket) !== undefined && this.pool) this.used.set(ticket, this.pool.now());
  }

  private oldestTicket(keep: unknown): number | undefined {
    for (const ticket of this.entries.rkeys()) if (ticket !== keep) return ticket;
    return undefined;
  }

  /** @internal */
  release(ticket: number): void {
    this.entries.delete(ticket);
  }
}

export class BudgetedMap<K, V> extends Map<K, V> {
  constructor(
    private readonly budget: ByteBudget,
    private readonly footprint: (value: V) => Footprint,
    private readonly tickets: Map<K, number>,
  ) {
    super();
  }

  override get(key: K): V | undefined {
    const ticket = this.tickets.get(key);
    if (ticket !== undefined) this.budget.touch(ticket);
    return super.get(key);
  }

  override set(key: K, value: V): this {
    // Map's constructor calls set() before the fields exist: nothing to charge then.
    if (!this.tickets) return super.set(key, value);
    const old = this.tickets.get(key);
    if (old !== undefined) this.budget.release(old);
    super.set(key, value);
    const bytes = bytesOf(this.footprint(value));
    // An entry larger than the whole budget is not kept at all.
    if (bytes > this.budget.maxBytes) {
      this.forget(key);
      return this;
    }
    this.tickets.set(key, this.budget.charge(this as BudgetedMap<unknown, unknown>, key, bytes));
    return this;
  }

  override delete(key: K): boolean {
    const ticket = this.tickets.get(key);
    if (ticket !== undefined) this.budget.release(ticket);
    this.tickets.delete(key);
    return super.delete(key);
  }

  override clear(): void {
    for (const ticket of this.tickets.values()) this.budget.release(ticket);
    this.tickets.clear();
    super.clear();
  }

  /** @internal Drops an entry the budget evicted. */
  forget(key: unknown): void {
    this.tickets.delete(key as K);
    super.delete(key as K);
  }
}
