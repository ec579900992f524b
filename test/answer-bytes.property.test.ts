import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { usersBytes } from '../src/presence/answers.js';
import { applyChange, changesFrom, createLedger, withChanges, type LedgerChange, type LedgerState } from '../src/presence/ledger.js';
import { PresenceState } from '../src/presence/state.js';
import { decodeLedger, encodeLedger } from '../src/store/codec.js';

/**
 * The bandwidth metric's reference size (a full modern answer's users), counted for each new
 * ledger state from the one counted before it: always what counting every user gives, on a
 * replica's own merges and on the copies it makes from another replica's changes.
 */

const NOW_MS = 1_763_700_000_000;

/** The users' part of the full modern answer, as JSON writes it (each entry and its comma). */
function counted(state: LedgerState): number {
  const presences: Record<string, { active_timestamp: number; idle_timestamp: number }> = {};
  for (const [id, e] of state.users) if (e.present) presences[id] = { active_timestamp: e.active, idle_timestamp: e.idle };
  // Without the braces, with a separator after every entry (one more than JSON writes).
  return Object.keys(presences).length === 0 ? 0 : JSON.stringify(presences).length - 1;
}

const change: fc.Arbitrary<LedgerChange> = fc
  .record({
    serverTimestamp: fc.integer({ min: 1, max: 60 }),
    presences: fc
      .array(
        fc.tuple(
          fc.integer({ min: 1, max: 700 }),
          fc.integer({ min: 0, max: 2_000_000_000 }).map((a) => ({ active_timestamp: a, idle_timestamp: a + 7 })),
        ),
        { maxLength: 80 },
      )
      .map((pairs) => new Map(pairs)),
    complete: fc.boolean(),
  })
  .map((observation) => ({ kind: 'observation' as const, observation }));

describe('full answer size, counted by the users that changed (B7)', () => {
  it('equals counting every user, for merges and for copies made from published changes', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(change, { maxLength: 20 }), async (changes) => {
        const state = new PresenceState(100);
        let writer = createLedger(NOW_MS);
        let copy = decodeLedger(encodeLedger(writer));
        for (const c of changes) {
          const next = applyChange(writer, c, NOW_MS);
          copy = withChanges(copy, decodeLedger(encodeLedger(changesFrom(writer, next))))!;
          writer = next;
          expect(await usersBytes(state, writer)).toBe(counted(writer));
          expect(await usersBytes(state, copy)).toBe(counted(copy));
        }
      }),
      { numRuns: 100 },
    );
  });
});
