import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { LedgerTable } from '../src/presence/ledger-table.js';
import type { LedgerEntry } from '../src/presence/ledger.js';

/**
 * The ledger's users in typed columns (B5, B7) read as the Map they stand for: under any
 * sequence of edits, each table holds what a Map given the same writes holds, walked every way,
 * and every table handed out before stays as it was (ledger states are values).
 */

const entry: fc.Arbitrary<LedgerEntry> = fc.record({
  active: fc.oneof(fc.integer({ min: 0, max: 2 ** 33 }), fc.double({ noNaN: true })),
  idle: fc.oneof(fc.integer({ min: 0, max: 2 ** 33 }), fc.double({ noNaN: true })),
  seenAt: fc.double({ noNaN: true }),
  // Ids are microsecond epochs, above 2^32.
  changedAt: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
  present: fc.boolean(),
});

/** Dense ids (as a server's are), some far apart, so tables reach several shard counts. */
const id = fc.oneof(fc.nat(2_000), fc.integer({ min: 0, max: 2 ** 31 - 1 }));
const edits = fc.array(fc.array(fc.tuple(id, entry), { maxLength: 700 }), { maxLength: 8 });

/** Entries the same to the bit (a -0 is not a 0: the store's codec tells them apart). */
const same = (a: LedgerEntry | undefined, b: LedgerEntry | undefined) =>
  a === undefined || b === undefined
    ? a === b
    : (['active', 'idle', 'seenAt', 'changedAt', 'present'] as const).every((f) => Object.is(a[f], b[f]));

const sorted = <V>(entries: Iterable<[number, V]>) => [...entries].sort((a, b) => a[0] - b[0]);

function expectSame(table: LedgerTable, map: ReadonlyMap<number, LedgerEntry>): void {
  const expected = sorted(map);
  expect(table.size).toBe(map.size);
  expect(sorted(table.entries())).toEqual(expected);
  expect(sorted(table)).toEqual(expected);
  expect([...table.keys()].sort((a, b) => a - b)).toEqual(expected.map(([k]) => k));
  expect([...table.values()].length).toBe(map.size);
  const walked: Array<[number, LedgerEntry]> = [];
  table.forEach((v, k) => {
    walked.push([k, v]);
  });
  expect(sorted(walked)).toEqual(expected);
  expect([...table.presentIds()].sort((a, b) => a - b)).toEqual(expected.filter(([, e]) => e.present).map(([k]) => k));
  for (const [k, e] of map) {
    expect(table.has(k)).toBe(true);
    expect(table.get(k)).toEqual(e);
  }
  expect(table.get(-1)).toBeUndefined();
  expect(table.has(2 ** 31 + 5)).toBe(false);
}

describe('LedgerTable', () => {
  it('behaves as a Map under any sequence of edits, and old tables stay as they were', () => {
    fc.assert(
      fc.property(edits, (rounds) => {
        let table = LedgerTable.empty();
        let map = new Map<number, LedgerEntry>();
        const history: Array<[LedgerTable, Map<number, LedgerEntry>]> = [[table, new Map(map)]];
        for (const writes of rounds) {
          const edit = table.edit();
          map = new Map(map);
          for (const [k, e] of writes) {
            edit.set(k, e);
            map.set(k, e);
            expect(edit.get(k)).toEqual(e);
          }
          const next = edit.done();
          if (writes.length === 0) expect(next.size).toBe(table.size);
          table = next;
          history.push([table, map]);
        }
        for (const [t, m] of history) expectSame(t, m);
      }),
      { numRuns: 80 },
    );
  });

  it('an edit goes on from the table it handed out without changing it', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(id, entry), { maxLength: 600 }), fc.array(fc.tuple(id, entry), { maxLength: 600 }), (a, b) => {
        const edit = LedgerTable.empty().edit();
        const first = new Map<number, LedgerEntry>();
        for (const [k, e] of a) {
          edit.set(k, e);
          first.set(k, e);
        }
        const t1 = edit.done();
        const second = new Map(first);
        for (const [k, e] of b) {
          edit.set(k, e);
          second.set(k, e);
        }
        expectSame(t1, first);
        expectSame(edit.done(), second);
      }),
      { numRuns: 60 },
    );
  });

  it('differences are exactly the ids whose entries differ, both ways', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(id, entry), { maxLength: 800 }), fc.array(fc.tuple(id, entry), { maxLength: 100 }), (a, b) => {
        const older = LedgerTable.from(new Map(a));
        const edit = older.edit();
        for (const [k, e] of b) edit.set(k, e);
        const newer = edit.done();
        const ids = new Set([...older.keys(), ...newer.keys()]);
        const expected = [...ids].filter((k) => !same(older.get(k), newer.get(k))).sort((x, y) => x - y);
        const got = [...newer.differences(older)];
        expect(got.map(([k]) => k).sort((x, y) => x - y)).toEqual(expected);
        for (const [k, mine, theirs] of got) {
          expect(mine).toEqual(newer.get(k));
          expect(theirs).toEqual(older.get(k));
        }
        // A table made from another by no change shares every shard: nothing to compare.
        expect([...older.edit().done().differences(older)]).toEqual([]);
      }),
      { numRuns: 60 },
    );
  });
});
