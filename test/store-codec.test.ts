import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { LedgerEntry, LedgerState } from '../src/presence/ledger.js';
import { CodecError, decodeLedger, encodeLedger } from '../src/store/codec.js';
import { plainLedger, realisticLedger } from './support/ledgers.js';

const anyNumber = fc.oneof(
  fc.integer({ min: -1_000, max: 1_000 }),
  fc.integer({ min: 1_600_000_000, max: 1_900_000_000 }),
  fc.maxSafeInteger(),
  fc.double(),
  fc.constant(-0),
);

const entry = (n: fc.Arbitrary<number>): fc.Arbitrary<LedgerEntry> =>
  fc.record({ active: n, idle: n, seenAt: n, changedAt: n, present: fc.boolean() }).map((e) => ({ ...e }));

const state = (n: fc.Arbitrary<number>, userId: fc.Arbitrary<number>): fc.Arbitrary<LedgerState> =>
  fc
    .record({
      epoch: n,
      lastId: n,
      users: fc.array(fc.tuple(userId, entry(n)), { maxLength: 30 }).map((pairs) => new Map(pairs)),
      merges: fc.array(fc.tuple(n, n), { maxLength: 32 }),
      raised: fc.array(fc.tuple(n, n, n), { maxLength: 4 }),
      completeAt: n,
    })
    .map((s) => ({ ...s })); // plain objects, as the ledger makes them

/** States as the ledger makes them: integer ids and timestamps, float server_timestamps. */
const ledgerLike: fc.Arbitrary<LedgerState> = fc
  .record({
    epoch: fc.integer({ min: 0, max: 2 ** 52 }),
    span: fc.integer({ min: 0, max: 100_000 }),
    seen: fc.array(fc.double({ min: 1_500_000_000, max: 2_000_000_000, noNaN: true }), { minLength: 1, maxLength: 6 }),
    raises: fc.nat(3),
    users: fc.array(
      fc.record({
        id: fc.integer({ min: 1, max: 2 ** 31 }),
        seen: fc.nat(5),
        back: fc.integer({ min: -100, max: 14 * 86_400 }),
        idleAfter: fc.nat(100_000),
        age: fc.nat(100_000),
        present: fc.boolean(),
      }),
      { maxLength: 40 },
    ),
  })
  .map(({ epoch, span, seen, raises, users }) => {
    const lastId = epoch + span;
    const map = new Map<number, LedgerEntry>();
    for (const u of users) {
      const seenAt = seen[u.seen % seen.length]!;
      const active = Math.floor(seenAt) - u.back;
      map.set(u.id, { active, idle: active + u.idleAfter, seenAt, changedAt: lastId - Math.min(u.age, span), present: u.present });
    }
    // Ranges the counter was raised past (I6), below the newest ids.
    const raised = Array.from({ length: raises }, (_, i) => [epoch + i * 10, epoch + i * 10 + 5, 1_800_000_000_000 + i] as const);
    return { epoch, lastId, users: map, raised, merges: seen.map((ts, i) => [ts, lastId - i] as const), completeAt: seen[0]! };
  });

describe('ledger codec (store of S1, S2)', () => {
  it('gives back exactly the state encoded, for ledger-like states', () => {
    fc.assert(
      fc.property(ledgerLike, (s) => {
        const bytes = encodeLedger(s);
        // The packed format; with raised ranges (I6) its variant, so that a ledger without any
        // is read by a replica of the release before them.
        expect(bytes[0]).toBe(s.raised.length > 0 ? 5 : 3);
        expect(isDeepStrictEqual(plainLedger(decodeLedger(bytes)), plainLedger(s))).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('gives back exactly the state encoded, for any numbers at all (-0, NaN, fractions, huge)', () => {
    fc.assert(
      fc.property(state(anyNumber, anyNumber), (s) => {
        expect(isDeepStrictEqual(plainLedger(decodeLedger(encodeLedger(s))), plainLedger(s))).toBe(true);
      }),
      { numRuns: 500 },
    );
  });

  it('keeps a 10,000-user realm in about 10 bytes per user', () => {
    const s = realisticLedger(10_000);
    const bytes = encodeLedger(s);
    expect(isDeepStrictEqual(plainLedger(decodeLedger(bytes)), plainLedger(s))).toBe(true);
    expect(bytes.length / 10_000).toBeLessThan(14);
  });

  it('rejects bytes it did not write with a CodecError, never another error', () => {
    const good = encodeLedger(realisticLedger(50));
    expect(() => decodeLedger(Buffer.from('{"json":true}'))).toThrow(CodecError);
    expect(() => decodeLedger(Buffer.alloc(0))).toThrow(CodecError);
    // Formats 1 and 2 (before completeAt) are not read: the store starts a new epoch instead (P5).
    expect(() => decodeLedger(Buffer.concat([Buffer.from([1]), good.subarray(1)]))).toThrow(CodecError);
    expect(() => decodeLedger(good.subarray(0, good.length - 3))).toThrow(CodecError);
    expect(() => decodeLedger(Buffer.concat([good, Buffer.from([0])]))).toThrow(CodecError);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (raw) => {
        try {
          decodeLedger(Buffer.from(raw));
        } catch (e) {
          expect(e).toBeInstanceOf(CodecError);
        }
      }),
      { numRuns: 500 },
    );
  });
});
