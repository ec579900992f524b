/**
 * B5, B7: the presence ledger's users, a persistent map from user id to LedgerEntry kept in
 * typed columns. It behaves as UserTable (user-table.ts) does: users spread over a power-of-two
 * number of shards by the low bits of their id, a change copies the shards it writes and shares
 * the rest, and every table once handed out stays as it was. But each shard is six columns
 * (sorted ids, active, idle, seenAt, changedAt, present: 37 bytes a user) in place of a Map of
 * objects of heap numbers (about 180 bytes a user); an entry is made afresh on each read.
 *
 * active and idle are Float64: P2's timestamps are upstream numbers, not bound to integers or
 * 32 bits; changedAt ids are microsecond epochs, above 2^32.
 */

/** One user's entry in a presence ledger (ledger.ts). */
export interface LedgerEntry {
  readonly active: number;
  readonly idle: number;
  /** server_timestamp of the snapshot that last changed this entry (data or visibility). */
  readonly seenAt: number;
  /** The id at which this user's data last changed, or they came back into view. */
  readonly changedAt: number;
  /** False once a newer complete snapshot left the user out. */
  readonly present: boolean;
}

/** Users per shard before the shard count doubles; a written shard is copied whole. */
const MAX_PER_SHARD = 256;
const MAX_SHARDS = 4096;

/** One shard's users in columns, ids ascending. Read-only. */
export class LedgerShard implements ReadonlyMap<number, LedgerEntry> {
  static readonly EMPTY = LedgerShard.of(new Map());

  private constructor(
    private readonly ids: Int32Array | Float64Array,
    private readonly active: Float64Array,
    private readonly idle: Float64Array,
    private readonly seenAt: Float64Array,
    private readonly changedAt: Float64Array,
    private readonly present: Uint8Array,
  ) {}

  /** The entries in columns (ids in Float64 where one is not a 32-bit integer). */
  static of(entries: ReadonlyMap<number, LedgerEntry>): LedgerShard {
    const keys = [...entries.keys()].sort((a, b) => a - b);
    const n = keys.length;
    const narrow = keys.every((id) => (id | 0) === id);
    const ids = narrow ? new Int32Array(keys) : new Float64Array(keys);
    const active = new Float64Array(n);
    const idle = new Float64Array(n);
    const seenAt = new Float64Array(n);
    const changedAt = new Float64Array(n);
    const present = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      const e = entries.get(keys[i]!)!;
      active[i] = e.active;
      idle[i] = e.idle;
      seenAt[i] = e.seenAt;
      changedAt[i] = e.changedAt;
      present[i] = e.present ? 1 : 0;
    }
    return new LedgerShard(ids, active, idle, seenAt, changedAt, present);
  }

  get size(): number {
    return this.ids.length;
  }

  /** Bytes its columns take. */
  get byteLength(): number {
    return this.ids.byteLength + 4 * this.active.byteLength + this.present.byteLength;
  }

  get(id: number): LedgerEntry | undefined {
    const i = this.position(id);
    return i < 0 ? undefined : this.entryAt(i);
  }

  has(id: number): boolean {
    return this.position(id) >= 0;
  }

  /** Whether the user's entry here has these values (false where the user is not here). */
  holds(id: number, e: LedgerEntry | undefined): boolean {
    const i = this.position(id);
    return i >= 0 && e !== undefined && this.sameAt(i, e);
  }

  *entries(): MapIterator<[number, LedgerEntry]> {
    for (let i = 0; i < this.ids.length; i++) yield [this.ids[i]!, this.entryAt(i)];
  }

  *keys(): MapIterator<number> {
    for (let i = 0; i < this.ids.length; i++) yield this.ids[i]!;
  }

  *values(): MapIterator<LedgerEntry> {
    for (let i = 0; i < this.ids.length; i++) yield this.entryAt(i);
  }

  [Symbol.iterator](): MapIterator<[number, LedgerEntry]> {
    return this.entries();
  }

  forEach(fn: (value: LedgerEntry, key: number, map: ReadonlyMap<number, LedgerEntry>) => void, thisArg?: unknown): void {
    for (let i = 0; i < this.ids.length; i++) fn.call(thisArg, this.entryAt(i), this.ids[i]!, this);
  }

  /** The ids of present users, ascending. */
  *presentIds(): Generator<number> {
    for (let i = 0; i < this.ids.length; i++) if (this.present[i] === 1) yield this.ids[i]!;
  }

  get [Symbol.toStringTag](): string {
    return 'LedgerShard';
  }

  private entryAt(i: number): LedgerEntry {
    return {
      active: this.active[i]!,
      idle: this.idle[i]!,
      seenAt: this.seenAt[i]!,
      changedAt: this.changedAt[i]!,
      present: this.present[i] === 1,
    };
  }

  private sameAt(i: number, e: LedgerEntry): boolean {
    return (
      Object.is(this.active[i], e.active) &&
      Object.is(this.idle[i], e.idle) &&
      Object.is(this.seenAt[i], e.seenAt) &&
      Object.is(this.changedAt[i], e.changedAt) &&
      (this.present[i] === 1) === e.present
    );
  }

  private position(id: number): number {
    const ids = this.ids;
    let lo = 0;
    let hi = ids.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const at = ids[mid]!;
      if (at === id) return mid;
      if (at < id) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }
}

type Shard = LedgerShard | Map<number, LedgerEntry>;

const sameEntry = (a: LedgerEntry, b: LedgerEntry) =>
  Object.is(a.active, b.active) &&
  Object.is(a.idle, b.idle) &&
  Object.is(a.seenAt, b.seenAt) &&
  Object.is(a.changedAt, b.changedAt) &&
  a.present === b.present;

export class LedgerTable implements ReadonlyMap<number, LedgerEntry> {
  private constructor(
    private readonly shards: ReadonlyArray<LedgerShard>,
    readonly size: number,
  ) {}

  static empty(): LedgerTable {
    return new LedgerTable([LedgerShard.EMPTY], 0);
  }

  /** A table with these entries (the same table when `entries` is one already). */
  static from(entries: ReadonlyMap<number, LedgerEntry>): LedgerTable {
    if (entries instanceof LedgerTable) return entries;
    const edit = LedgerTable.empty().edit();
    for (const [k, v] of entries) edit.set(k, v);
    return edit.done();
  }

  /** Bytes the shards' columns take. */
  get byteLength(): number {
    let n = 0;
    for (const shard of this.shards) n += shard.byteLength;
    return n;
  }

  get(id: number): LedgerEntry | undefined {
    return this.shards[id & (this.shards.length - 1)]!.get(id);
  }

  has(id: number): boolean {
    return this.shards[id & (this.shards.length - 1)]!.has(id);
  }

  *entries(): MapIterator<[number, LedgerEntry]> {
    for (const shard of this.shards) yield* shard.entries();
  }

  *keys(): MapIterator<number> {
    for (const shard of this.shards) yield* shard.keys();
  }

  *values(): MapIterator<LedgerEntry> {
    for (const shard of this.shards) yield* shard.values();
  }

  [Symbol.iterator](): MapIterator<[number, LedgerEntry]> {
    return this.entries();
  }

  forEach(fn: (value: LedgerEntry, key: number, map: ReadonlyMap<number, LedgerEntry>) => void, thisArg?: unknown): void {
    for (const shard of this.shards) {
      shard.forEach((v, k) => {
        fn.call(thisArg, v, k, this);
      });
    }
  }

  /** The ids of present users (no entry made per user). */
  *presentIds(): Generator<number> {
    for (const shard of this.shards) yield* shard.presentIds();
  }

  get [Symbol.toStringTag](): string {
    return 'LedgerTable';
  }

  /**
   * The sum of `measure` over this table's shards, each shard's figure kept in `cache`: shards
   * are shared between a table and the tables made from it by changes, so a table made by a
   * few changes costs what it changed. `pause` is awaited after every `every` shards measured
   * (B7: a recount of a whole 100k-user realm is then no single block).
   */
  async sumOfShards(
    cache: WeakMap<object, number>,
    measure: (shard: ReadonlyMap<number, LedgerEntry>) => number,
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
   * Where this table and `older` differ: [id, entry here, entry there] for every id whose entry
   * has other values in the two (undefined where one lacks the id), in no particular order.
   * Shards the two share are skipped, so a table made from `older` by a few changes is compared
   * in what was copied, not in full; any two tables are compared exactly.
   */
  *differences(older: LedgerTable): Generator<[number, LedgerEntry | undefined, LedgerEntry | undefined]> {
    const sameShape = older.shards.length === this.shards.length;
    const pairs: Array<[ReadonlyMap<number, LedgerEntry>, ReadonlyMap<number, LedgerEntry>]> = sameShape
      ? this.shards.map((shard, i) => [shard, older.shards[i]!])
      : [[this, older]];
    for (const [mine, theirs] of pairs) {
      if (mine === theirs) continue;
      for (const [id, v] of mine) {
        const o = theirs.get(id);
        if (o === undefined || !sameEntry(o, v)) yield [id, v, o];
      }
      for (const [id, o] of theirs) if (!mine.has(id)) yield [id, undefined, o];
    }
  }

  /** Changes to make a new table from this one; this one stays as it is. */
  edit(): LedgerTableEdit {
    return new LedgerTableEdit(this.shards, this.size);
  }

  /** @internal for LedgerTableEdit */
  static made(shards: ReadonlyArray<LedgerShard>, size: number): LedgerTable {
    return new LedgerTable(shards, size);
  }
}

/** A table being changed: a shard is read into a Map on its first write, the rest shared. */
export class LedgerTableEdit {
  private shards: Shard[];
  private changed = false;

  constructor(
    private base: ReadonlyArray<LedgerShard>,
    private size: number,
  ) {
    this.shards = base as Shard[];
  }

  get(id: number): LedgerEntry | undefined {
    return this.shards[id & (this.shards.length - 1)]!.get(id);
  }

  set(id: number, value: LedgerEntry): void {
    const i = id & (this.shards.length - 1);
    if (!this.changed) {
      this.shards = [...this.base];
      this.changed = true;
    }
    let shard = this.shards[i]!;
    if (shard instanceof LedgerShard) {
      shard = new Map(shard);
      this.shards[i] = shard;
    }
    if (!shard.has(id)) this.size++;
    shard.set(id, value);
    if (this.size > this.shards.length * MAX_PER_SHARD && this.shards.length < MAX_SHARDS) this.split();
  }

  /** The new table (its written shards into columns); the base one when nothing was set. */
  done(): LedgerTable {
    if (!this.changed) return LedgerTable.made(this.base, this.size);
    const shards = this.shards.map((s) => (s instanceof LedgerShard ? s : LedgerShard.of(s)));
    // Later changes start from the table handed out, never writing to it.
    this.base = shards;
    this.shards = shards;
    this.changed = false;
    return LedgerTable.made(shards, this.size);
  }

  /** Doubles the shard count: each shard splits by one more bit of the id (every shard is new). */
  private split(): void {
    const n = this.shards.length * 2;
    const next: Array<Map<number, LedgerEntry>> = Array.from({ length: n }, () => new Map());
    for (const shard of this.shards) for (const [k, v] of shard) next[k & (n - 1)]!.set(k, v);
    this.shards = next;
  }
}
