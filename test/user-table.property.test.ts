import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { UserTable } from '../src/presence/user-table.js';

/**
 * The ledger's user table (B7) read as the Map it stands for: whatever its number of shards
 * (one for a small realm, more past 256 users a shard), every way of walking it yields each
 * user once, with its value, as a plain Map with the same entries would.
 */

const byId = (a: readonly [number, number], b: readonly [number, number]) => a[0] - b[0];

describe('UserTable walks', () => {
  it('entries, keys, values, for…of, spread and forEach hold the same users as a Map', () => {
    fc.assert(
      fc.property(fc.uniqueArray(fc.nat(50_000), { maxLength: 3_000 }), (ids) => {
        const map = new Map(ids.map((id) => [id, id * 2 + 1] as [number, number]));
        const table = UserTable.from(map);
        const expected = [...map].sort(byId);
        expect(table.size).toBe(map.size);
        expect([...table.entries()].sort(byId)).toEqual(expected);
        expect([...table].sort(byId)).toEqual(expected);
        expect([...table.keys()].sort((a, b) => a - b)).toEqual(expected.map(([id]) => id));
        expect([...table.values()].sort((a, b) => a - b)).toEqual(expected.map(([, v]) => v).sort((a, b) => a - b));
        const walked: Array<[number, number]> = [];
        table.forEach((v, id) => {
          walked.push([id, v]);
        });
        expect(walked.sort(byId)).toEqual(expected);
        // An iterator is its own iterable, and ends for good.
        const it = table.entries();
        expect(it[Symbol.iterator]()).toBe(it);
        for (const _ of it);
        expect(it.next().done).toBe(true);
      }),
      { numRuns: 60 },
    );
  });
});
