/**
 * B7: a persistent map from user id to a value, for the presence ledger's users. A change
 * makes a new table that shares every part it did not touch with the old one, so a merge costs
 * what it changes, not the realm's size (a plain Map would be copied whole per merge: 63 ms at
 * 100k users), and every table once handed out stays as it was (ledger states are values).
 *
 * Users are spread over a power-of-two number of shards by the low bits of their id (ids are
 * dense per server, so shards stay even); a change copies the shards it writes to. The shard
 * count grows with the table, so a small realm is one Map.
 */

/** Users per shard before the shard count doubles; a written shard is copied whole. */
const MAX_PER_SHARD = 256;
const MAX_SHARDS = 4096;

export class UserTable<V> implements ReadonlyMap<number, V> {
  private constructor(
    private readonly shards: ReadonlyArray<ReadonlyMap<number, V>>,
    readonly size: number,
  ) {}

  static empty<V>(): UserTable<V> {
    return new UserTable<V>([new Map()], 0);
  }

  /** A table with these entries (the same table when `entries` is one already). */
  static from<V>(entries: ReadonlyMap<number, V>): UserTable<V> {
    if (entries instanceof UserTable) return entries as UserTable<V>;
    const edit = UserTable.empty<V>().edit();
    for (const [k, v] of entries) edit.set(k, v);
    return edit.done();
  }

  get(id: number): V | undefined {
    return this.shards[id & (this.shards.length - 1)]!.get(id);
  }

  has(id: number): boolean {
    return this.shards[id & (this.shards.length - 1)]!.has(id);
  }

  *entries(): MapIterator<[number, V]> {
    for (const shard of this.shards) yield* shard.entries();
  }

  *keys(): MapIterator<number> {
    for (const shard of this.shards) yield* shard.keys();
  }

  *values(): MapIterator<V> {
    for (const shard of this.shards) yield* shard.values();
  }

  [Symbol.iterator](): MapIterator<[number, V]> {
    return this.entries();
  }

  forEach(fn: (value: V, key: number, map: ReadonlyMap<number, V>) => void, thisArg?: unknown): void {
    // Map's own forEach: no [key, value] array per user (B7: walks of 100k users).
    for (const shard of this.shards) {
      shard.forEach((v, k) => {
        fn.call(thisArg, v, k, this);
      });
    }
  }

  get [Symbol.toStringTag](): string {
    return 'UserTable';
  }

  /**
   * The sum of `measure` over this table's shards, each shard's figure kept in `cache`: shards
   * are shared between a table and the tables made from it by changes, so a table made by a
   * few changes costs what it changed, whatever became of the tables before it. `pause` is
   * awaited after every `every` shards measured (B7: a recount of a whole 100k-user realm is
   * then no single block).
   */
  async sumOfShards(
    cache: WeakMap<object, number>,
    measure: (shard: ReadonlyMap<number, V>) => number,
    pause: () => Promise<unknown>,
    every: number,
  ): Promise<number> {
    let sum = 0;
    let measured = 0;
    for (const shard of this.shards) {
      let n = cache.get(shard);
      if (n === undefined) {
        n = measure(shard);
        cache.set(shard, n);
        if (++measured % every === 0) await pause();
      }
      sum += n;
    }
    return sum;
  }

  /**
   * Where this table and `older` differ: [id, value here, value there] for every id whose value
   * object is not the same in both (undefined where one lacks the id), in no particular order.
   * Shards the two share are skipped, so a table made from `older` by a few changes is
   * compared in what was copied, not in full; any two tables are compared exactly.
   */
  *differences(older: UserTable<V>): Generator<[number, V | undefined, V | undefined]> {
    const sameShape = older.shards.length === this.shards.length;
    const pairs: Array<[ReadonlyMap<number, V>, ReadonlyMap<number, V>]> = sameShape
      ? this.shards.map((shard, i) => [shard, older.shards[i]!])
      : [[this, older]];
    for (const [mine, theirs] of pairs) {
      if (mine === theirs) continue;
      for (const [id, v] of mine) {
        const o = theirs.get(id);
        if (o !== v) yield [id, v, o];
      }
      for (const [id, o] of theirs) if (!mine.has(id)) yield [id, undefined, o];
    }
  }

  /** Changes to make a new table from this one; this one stays as it is. */
  edit(): UserTableEdit<V> {
    return new UserTableEdit(this.shards, this.size);
  }

  /** @internal for UserTableEdit */
  static made<V>(shards: ReadonlyArray<ReadonlyMap<number, V>>, size: number): UserTable<V> {
    return new UserTable(shards, size);
  }
}

/** A table being changed: shards are copied on their first write, the rest shared. */
export class UserTableEdit<V> {
  private shards: Array<ReadonlyMap<number, V>>;
  private readonly own = new Set<number>();
  private changed = false;

  constructor(
    private readonly base: ReadonlyArray<ReadonlyMap<number, V>>,
    private size: number,
  ) {
    this.shards = base as Array<ReadonlyMap<number, V>>;
  }

  get(id: number): V | undefined {
    return this.shards[id & (this.shards.length - 1)]!.get(id);
  }

  set(id: number, value: V): void {
    const i = id & (this.shards.length - 1);
    if (!this.changed) {
      this.shards = [...this.base];
      this.changed = true;
    }
    let shard = this.shards[i] as Map<number, V>;
    if (!this.own.has(i)) {
      shard = new Map(shard);
      this.shards[i] = shard;
      this.own.add(i);
    }
    if (!shard.has(id)) this.size++;
    shard.set(id, value);
    if (this.size > this.shards.length * MAX_PER_SHARD && this.shards.length < MAX_SHARDS) this.split();
  }

  /** The new table; the base one when nothing was set. */
  done(): UserTable<V> {
    return UserTable.made(this.shards, this.size);
  }

  /** Doubles the shard count: each shard splits by one more bit of the id (every shard is new). */
  private split(): void {
    const n = this.shards.length * 2;
    const next: Array<Map<number, V>> = Array.from({ length: n }, () => new Map());
    for (const shard of this.shards) for (const [k, v] of shard) next[k & (n - 1)]!.set(k, v);
    this.shards = next;
    this.own.clear();
    for (let i = 0; i < n; i++) this.own.add(i);
  }
}
