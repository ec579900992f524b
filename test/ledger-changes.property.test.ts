import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  answer,
  applyChange,
  changesFrom,
  createLedger,
  withChanges,
  type LedgerChange,
  type LedgerState,
  type ModernPresence,
} from '../src/presence/ledger.js';
import { decodeLedger, encodeLedger } from '../src/store/codec.js';
import { plainLedger } from './support/ledgers.js';

/**
 * S1: a replica that holds a ledger and applies the changes another replica
 * published (`changesFrom` → bytes → `withChanges`) ends with exactly the ledger a full read
 * of the writer's value gives, and answers every delta as the writer does (its change index is
 * extended, not rebuilt).
 */

const NOW_MS = 1_763_700_000_000;

const presence: fc.Arbitrary<ModernPresence> = fc
  .tuple(fc.integer({ min: 1_763_000_000, max: 1_763_001_000 }), fc.nat(300))
  .map(([a, d]) => ({ active_timestamp: a, idle_timestamp: a + d }));

const change: fc.Arbitrary<LedgerChange> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc
      .record({
        // Whole and fractional server timestamps, some late (older than the ledger has seen).
        serverTimestamp: fc.oneof(fc.integer({ min: 1, max: 60 }), fc.double({ min: 1, max: 60, noNaN: true })),
        presences: fc.array(fc.tuple(fc.integer({ min: 1, max: 40 }), presence), { maxLength: 12 }).map((pairs) => new Map(pairs)),
        complete: fc.boolean(),
      })
      .map((observation) => ({ kind: 'observation' as const, observation })),
  },
  // Raises, a few of them implausible (beyond the clock) or below the counter.
  { weight: 1, arbitrary: fc.nat(1_200).map((n) => ({ kind: 'counter' as const, atLeast: (NOW_MS - 1) * 1000 + n })) },
);

const roundTrip = (s: LedgerState) => decodeLedger(encodeLedger(s));

/** The answers of `state` to a client at each id that matters: every user's changedAt and the one before, the ends. */
function deltas(state: LedgerState): unknown[] {
  const ids = new Set([state.epoch, state.lastId]);
  for (const e of state.users.values()) ids.add(e.changedAt).add(e.changedAt - 1);
  return [...ids].sort((a, b) => a - b).map((id) => answer(state, { lastUpdateId: id, serverTimestamp: 1 }));
}

describe('ledger changes between replicas (S1)', () => {
  it('a replica applying published changes holds exactly what a full read gives, and answers the same deltas', () => {
    fc.assert(
      fc.property(
        fc.array(change, { maxLength: 25 }),
        fc.array(fc.boolean(), { maxLength: 25 }),
        // Whether the follower asked for a delta before (its copy indexed) or not.
        (changes, askEarly) => {
          let writer = createLedger(NOW_MS - 1);
          // The follower starts from a full read, as after a cold start.
          let follower = roundTrip(writer);
          for (const [i, c] of changes.entries()) {
            const next = applyChange(writer, c, NOW_MS);
            if (askEarly[i]) deltas(follower);
            const applied = withChanges(follower, roundTrip(changesFrom(writer, next)));
            expect(applied).toBeDefined();
            follower = applied!;
            writer = next;
            expect(plainLedger(follower)).toEqual(plainLedger(roundTrip(writer)));
          }
          expect(deltas(follower)).toEqual(deltas(writer));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('publishes only the users a change touched', () => {
    const base = applyChange(
      createLedger(NOW_MS - 1),
      {
        kind: 'observation',
        observation: {
          serverTimestamp: 10,
          complete: true,
          presences: new Map(Array.from({ length: 3_000 }, (_, i) => [i + 1, { active_timestamp: 100, idle_timestamp: 100 }])),
        },
      },
      NOW_MS,
    );
    const next = applyChange(
      base,
      {
        kind: 'observation',
        observation: { serverTimestamp: 11, complete: false, presences: new Map([[7, { active_timestamp: 200, idle_timestamp: 200 }]]) },
      },
      NOW_MS,
    );
    const changes = changesFrom(base, next);
    expect([...changes.users.keys()]).toEqual([7]);
    expect(changes.lastId).toBe(next.lastId);
    // Grown past a shard split on the way: still exactly the writer's state.
    const follower = withChanges(roundTrip(base), roundTrip(changes))!;
    expect(plainLedger(follower)).toEqual(plainLedger(next));
    expect(answer(follower, { lastUpdateId: base.lastId, serverTimestamp: 11 })).toEqual(
      answer(next, { lastUpdateId: base.lastId, serverTimestamp: 11 }),
    );
  });

  it('refuses changes of another history (another epoch, or a counter behind the copy): the caller reads in full', () => {
    const one = createLedger(NOW_MS - 1);
    const other = createLedger(NOW_MS);
    expect(withChanges(one, changesFrom(other, other))).toBeUndefined();
    const ahead = applyChange(one, { kind: 'counter', atLeast: one.lastId + 5 }, NOW_MS);
    expect(withChanges(ahead, changesFrom(one, one))).toBeUndefined();
  });
});
