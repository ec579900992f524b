/**
 * B5, B7: a read-only map from user id to a value kept in typed columns by position (a snapshot's
 * presences, columns.ts; a ledger shard's entries, ledger-table.ts). A subclass says where an id
 * is (`position`, -1 when absent) and makes the value at a position (`entryAt`, afresh on each
 * read); the rest of ReadonlyMap is walked here, ids in column order.
 */
export abstract class ColumnMap<V> implements ReadonlyMap<number, V> {
  protected abstract readonly ids: ArrayLike<number>;
  protected abstract position(id: number): number;
  protected abstract entryAt(i: number): V;
  abstract get [Symbol.toStringTag](): string;

  get size(): number {
    return this.ids.length;
  }

  get(id: number): V | undefined {
    const i = this.position(id);
    return i < 0 ? undefined : this.entryAt(i);
  }

  has(id: number): boolean {
    return this.position(id) >= 0;
  }

  *entries(): MapIterator<[number, V]> {
    for (let i = 0; i < this.ids.length; i++) yield [this.ids[i]!, this.entryAt(i)];
  }

  *keys(): MapIterator<number> {
    for (let i = 0; i < this.ids.length; i++) yield this.ids[i]!;
  }

  *values(): MapIterator<V> {
    for (let i = 0; i < this.ids.length; i++) yield this.entryAt(i);
  }

  [Symbol.iterator](): MapIterator<[number, V]> {
    return this.entries();
  }

  forEach(fn: (value: V, key: number, map: ReadonlyMap<number, V>) => void, thisArg?: unknown): void {
    for (let i = 0; i < this.ids.length; i++) fn.call(thisArg, this.entryAt(i), this.ids[i]!, this);
  }
}
