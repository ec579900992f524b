import { ColumnMap } from './column-map.js';

/**
 * B5, B7: the presence ledger's users, a persistent map from user id to LedgerEntry kept in
 * typed columns: users spread over a power-of-two number of shards by the low bits of their id,
 * a change copies the shards it writes and shares the rest, and every table once handed out
 * stays as it was. Each shard is six columns (sorted ids, active, idle, seenAt, changedAt,
 * present: 37 bytes a user) in place of a Map of objects of heap numbers (about 180 bytes a
 * user); an entry is made afresh on each read.
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

type Columns = [
  ids: Int32Array | Float64Array,
  active: Float64Array,
  idle: Float64Array,
  seenAt: Float64Array,
  changedAt: Float64Array,
  present: Uint8Array,
];

/** One shard's users in columns, ids ascending. Read-only. */
export class LedgerShard extends ColumnMap<LedgerEntry> {
  static readonly EMPTY = LedgerShard.of(new Map());

  protected constructor(
    protected override readonly ids: Int32Array | Float64Array,
    protected readonly active: Float64Array,
    protected readonly idle: Float64Array,
    protected readonly seenAt: Float64Array,
    protected readonly changedAt: Float64Array,
    protected readonly present: Uint8Array,
  ) {
    super();
  }

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

  /** @internal for ShardDraft: a shard of these columns, as they are. */
  static made(...columns: Columns): LedgerShard {
    return new LedgerShard(...columns);
  }

  /** @internal for ShardDraft: `make` given a copy of the columns (or, from a draft, its own). */
  draft<T>(make: (...columns: Columns) => T): T {
    const own = this instanceof ShardDraft;
    const copy = <A extends Int32Array | Float64Array | Uint8Array>(a: A) => (own ? a : (a.slice() as A));
    return make(copy(this.ids), copy(this.active), copy(this.idle), copy(this.seenAt), copy(this.changedAt), copy(this.present));
  }

  /** Bytes its columns take. */
  get byteLength(): number {
    return this.ids.byteLength + 4 * this.active.byteLength + this.present.byteLength;
  }

  /** The ids of present users, ascending. */
  *presentIds(): Generator<number> {
    for (let i = 0; i < this.ids.length; i++) if (this.present[i] === 1) yield this.ids[i]!;
  }

  override get [Symbol.toStringTag](): string {
    return 'LedgerShard';
  }

  protected entryAt(i: number): LedgerEntry {
    return {
      active: this.active[i]!,
      idle: this.idle[i]!,
      seenAt: this.seenAt[i]!,
      changedAt: this.changedAt[i]!,
      present: this.present[i] === 1,
    };
  }

  protected position(id: number): number {
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

/**
 * A shard being changed: a copy of its columns (a copy of bytes, no entry made), users already
 * there written in place, new ones kept aside until the shard is done.
 */
class ShardDraft extends LedgerShard {
  private readonly added = new Map<number, LedgerEntry>();

  static from(shard: LedgerShard): ShardDraft {
    return shard.draft((...columns) => new ShardDraft(...columns));
  }

  override get size(): number {
    return this.ids.length + this.added.size;
  }

  override get(id: number): LedgerEntry | undefined {
    const i = this.position(id);
    return i < 0 ? this.added.get(id) : this.entryAt(i);
  }

  override has(id: number): boolean {
    return this.position(id) >= 0 || this.added.has(id);
  }

  override *entries(): MapIterator<[number, LedgerEntry]> {
    yield* super.entries();
    yield* this.added.entries();
  }

  override *keys(): MapIterator<number> {
    for (const [id] of this.entries()) yield id;
  }

  override *values(): MapIterator<LedgerEntry> {
    for (const [, e] of this.entries()) yield e;
  }

  override forEach(fn: (value: LedgerEntry, key: number, map: ReadonlyMap<number, LedgerEntry>) => void, thisArg?: unknown): void {
    for (const [id, e] of this.entries()) fn.call(thisArg, e, id, this);
  }

  /** Sets the user's entry; true when the user is new to the shard. */
  put(id: number, e: LedgerEntry): boolean {
    const i = this.position(id);
    if (i < 0) {
      const isNew = !this.added.has(id);
      this.added.set(id, e);
      return isNew;
    }
    this.active[i] = e.active;
    this.idle[i] = e.idle;
    this.seenAt[i] = e.seenAt;
    this.changedAt[i] = e.changedAt;
    this.present[i] = e.present ? 1 : 0;
    return false;
  }

  /** The shard as written (the draft is not to be written after). */
  done(): LedgerShard {
    if (this.added.size === 0) return this.draft((...columns) => LedgerShard.made(...columns));
    return LedgerShard.of(new Map(this.entries()));
  }
}

type Shard = LedgerShard | ShardDraft;

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

/** A table being changed: a shard's columns are copied on its first write, the rest shared. */
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
    const at = this.shards[i]!;
    const shard = at instanceof ShardDraft ? at : ShardDraft.from(at);
    this.shards[i] = shard;
    if (shard.put(id, value)) this.size++;
    if (this.size > this.shards.length * MAX_PER_SHARD && this.shards.length < MAX_SHARDS) this.split();
  }

  /** The new table (its written shards into columns); the base one when nothing was set. */
  done(): LedgerTable {
    if (!this.changed) return LedgerTable.made(this.base, this.size);
    const shards = this.shards.map((s) => (s instanceof ShardDraft ? s.done() : s));
    // Later changes start from the table handed out, never writing to it.
    this.base = shards;
    this.shards = shards;
    this.changed = false;
    return LedgerTable.made(shards, this.size);
  }

  /** Doubles the shard count: each shard splits by one more bit of the id (every shard is new). */
  private split(): void {
    const n = this.shards.length * 2;
    const next: ShardDraft[] = Array.from({ length: n }, () => ShardDraft.from(LedgerShard.EMPTY));
    for (const shard of this.shards) for (const [k, v] of shard) next[k & (n - 1)]!.put(k, v);
    this.shards = next;
  }
}
