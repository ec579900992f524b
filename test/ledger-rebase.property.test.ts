import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  answer,
  applyChange,
  createLedger,
  merge,
  prepareMerge,
  raiseCounter,
  rebasedMerge,
  type LedgerChange,
  type LedgerState,
  type ModernPresence,
  type Observation,
} from '../src/presence/ledger.js';
import { MemoryStore } from '../src/store/memory.js';
import { decodeLedger, encodeLedger } from '../src/store/codec.js';
import { plainLedger } from './support/ledgers.js';

/**
 * B7, I7: a merge prepared on a realm's ledger (`prepareMerge`) and rebased over the changes
 * that came in between (`rebasedMerge`: every poll's own report, P15, and whatever else a store
 * applied meanwhile) is, for every client, the merge of the same observation made after those
 * changes: the same entries and counter, every id a client may hold answered with the same
 * presences, ids strictly increasing and never issued twice.
 */

const NOW_MS = 1_763_700_000_000;
const USERS = 12;

const presence: fc.Arbitrary<ModernPresence> = fc
  .tuple(fc.integer({ min: 1_763_000_000, max: 1_763_000_400 }), fc.nat(300))
  .map(([a, d]) => ({ active_timestamp: a, idle_timestamp: a + d }));

const presences = (maxLength: number) =>
  fc.array(fc.tuple(fc.integer({ min: 1, max: USERS }), presence), { maxLength }).map((pairs) => new Map(pairs));

/** Whole and fractional server timestamps, some late (older than the ledger has seen), some tied. */
const serverTimestamp = fc.oneof(fc.integer({ min: 1, max: 60 }), fc.double({ min: 1, max: 60, noNaN: true }));

const observation: fc.Arbitrary<Observation> = fc.record({
  serverTimestamp,
  presences: presences(USERS),
  complete: fc.boolean(),
  invisibleMode: fc.boolean(),
  dateTimed: fc.boolean(),
});

/** What may come in between: a caller's own report (P15), a per-caller snapshot, a counter raise (I6). */
const between: fc.Arbitrary<LedgerChange> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc
      .record({ user: fc.integer({ min: 1, max: USERS + 2 }), p: presence, at: fc.integer({ min: 1, max: 60 }) })
      .map(({ user, p, at }) => ({
        kind: 'observation' as const,
        observation: { serverTimestamp: at + 0.999, presences: new Map([[user, p]]), complete: false, report: true },
      })),
  },
  {
    weight: 2,
    arbitrary: fc
      .record({ serverTimestamp, presences: presences(4), dateTimed: fc.boolean() })
      .map((o) => ({ kind: 'observation' as const, observation: { ...o, complete: false } })),
  },
  { weight: 1, arbitrary: fc.nat(1_200).map((n) => ({ kind: 'counter' as const, atLeast: (NOW_MS - 1) * 1000 + n })) },
);

const noPause = async () => {};

/** Every state of a history, in order. */
function history(from: LedgerState, changes: LedgerChange[]): LedgerState[] {
  const states = [from];
  for (const c of changes) states.push(applyChange(states[states.length - 1]!, c, NOW_MS));
  return states;
}

/** The ids a client may hold of these states: every user's id, each counter, one below each. */
function heldIds(states: LedgerState[]): number[] {
  const ids = new Set<number>();
  for (const s of states) {
    ids.add(s.lastId).add(s.lastId - 1);
    for (const e of s.users.values()) ids.add(e.changedAt).add(e.changedAt - 1);
  }
  return [...ids].sort((a, b) => a - b);
}

/** What a client at `id` gets, its id aside (the ledger's own view, and a caller's view of some users). */
function seenAt(state: LedgerState, id: number) {
  return [undefined, [1, 2, 3, 5, 8]].map((visible) => {
    const a = answer(state, { visible, lastUpdateId: id, serverTimestamp: 60 });
    return { presences: a.presences, full: a.full };
  });
}

/**
 * A rebased merge against the full merge of the same observation after the same changes:
 * `before`, the states both come from, the last of which issued the last id the two share (the
 * ids above it may differ in order); `held`, the ids a client may hold of both (default: of `before`).
 */
function expectSameForClients(rebased: LedgerState, full: LedgerState, before: LedgerState[], held = heldIds(before)): void {
  const now = before[before.length - 1]!;
  expect({ ...rebased, users: undefined }).toEqual({ ...full, users: undefined });
  expect(rebased.users.size).toBe(full.users.size);
  const newIds = new Set<number>();
  for (const [userId, f] of full.users) {
    const r = rebased.users.get(userId)!;
    expect({ ...r, changedAt: 0 }).toEqual({ ...f, changedAt: 0 });
    if (f.changedAt <= now.lastId) expect(r.changedAt).toBe(f.changedAt);
    else {
      // Moved above every id issued before, within the counter, and never twice (I1).
      expect(r.changedAt).toBeGreaterThan(now.lastId);
      expect(r.changedAt).toBeLessThanOrEqual(rebased.lastId);
      expect(newIds.has(r.changedAt)).toBe(false);
      newIds.add(r.changedAt);
    }
  }
  for (const id of held) {
    expect(seenAt(rebased, id)).toEqual(seenAt(full, id));
    expect(answer(rebased, { lastUpdateId: id, serverTimestamp: 60 }).presenceLastUpdateId).toBeGreaterThanOrEqual(id); // X1
  }
  // The delta index it extended answers as one sorted anew, also for the ids it issued.
  for (const id of [...held, ...heldIds([rebased])]) expect(seenAt(rebased, id)).toEqual(seenAt(plainLedger(rebased)!, id));
}

describe('a prepared merge rebased over the changes in between (B7, I7)', () => {
  it('gives every client what the full merge after those changes gives', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(observation, { maxLength: 6 }),
        observation,
        fc.array(between, { minLength: 1, maxLength: 6 }),
        fc.boolean(),
        async (earlier, obs, changes, indexed) => {
          let base = createLedger(NOW_MS);
          for (const o of earlier) base = merge(base, o);
          // A copy asked for deltas before (its index extended since) or not (built when asked).
          if (!indexed) base = { ...base };
          const prepared = await prepareMerge(base, obs, noPause);
          expect(plainLedger(prepared.next)).toEqual(plainLedger(merge(base, obs)));
          const states = history(base, changes);
          const now = states[states.length - 1]!;
          const full = merge(now, obs);
          const rebased = rebasedMerge(now, obs, prepared);
          // Only a report, a per-caller snapshot or a raise came in between: always rebased.
          if (now === base) expect(applyChange(now, { kind: 'observation', observation: obs, prepared }, NOW_MS)).toBe(prepared.next);
          expect(rebased).toBeDefined();
          expectSameForClients(rebased!, full, states);
          // A store applies the same.
          expect(plainLedger(applyChange(now, { kind: 'observation', observation: obs, prepared }, NOW_MS))).toEqual(plainLedger(rebased));
          // And the realm goes on alike: a report after it, then every client's id again.
          const own = obs.presences.get(1) ?? { active_timestamp: 1_763_000_500, idle_timestamp: 1_763_000_500 };
          const report: Observation = { serverTimestamp: 61.999, report: true, complete: false, presences: new Map([[1, own]]) };
          const after = merge(rebased!, report);
          // Both issued the same counter; a client holds one of the ids between only from one of them.
          expectSameForClients(after, merge(full, report), states, [...heldIds(states), rebased!.lastId]);
          expect(answer(after, { lastUpdateId: rebased!.lastId, serverTimestamp: 62 }).presences).toEqual(
            answer(merge(full, report), { lastUpdateId: full.lastId, serverTimestamp: 62 }).presences,
          );
        },
      ),
      { numRuns: 300 },
    );
  }, 60_000); // a few seconds alone; the whole suite on two cores can take ten times that
});

const p = (active: number, idle = active): ModernPresence => ({ active_timestamp: active, idle_timestamp: idle });
const snapshot = (serverTimestamp: number, users: Array<[number, ModernPresence]>, complete = true): Observation => ({
  serverTimestamp,
  presences: new Map(users),
  complete,
});
const report = (serverTimestamp: number, user: number, active: number): Observation => ({
  serverTimestamp: serverTimestamp + 0.999,
  presences: new Map([[user, p(active)]]),
  complete: false,
  report: true,
});

/** A realm of `users` (ids 1…users), all shown by a complete snapshot at 1,010. */
function realm(users: number): LedgerState {
  return merge(
    createLedger(NOW_MS),
    snapshot(
      1_010,
      Array.from({ length: users }, (_, i) => [i + 1, p(901 + i)]),
    ),
  );
}

/** The refresh of the cases, at 1,020: user 1 idle later, user 2 active later, user 3 left out, 4… unchanged. */
const refresh = (base: LedgerState) =>
  snapshot(1_020, [
    [1, p(1_012, 1_018)],
    [2, p(1_019)],
    ...[...base.users.keys()].filter((u) => u > 3).map((u): [number, ModernPresence] => [u, p(900 + u)]),
  ]);

describe('rebase cases', () => {
  it.each<[string, (base: LedgerState) => LedgerState, boolean]>([
    ['a report after the refresh, on a user it leaves alone', (b) => merge(b, report(1_025, 4, 1_025)), true],
    ['a report after the refresh, on a user it changes too (the report is newer, I3)', (b) => merge(b, report(1_025, 1, 1_025)), true],
    ['a report before the refresh, on a user it changes too (each time the later, I8)', (b) => merge(b, report(1_015, 1, 1_015)), true],
    ['a report on a user the refresh leaves out', (b) => merge(b, report(1_015, 3, 1_015)), true],
    ['a report on a user new to the realm', (b) => merge(b, report(1_025, 99, 1_025)), true],
    ['a report and a counter raise (I6)', (b) => raiseCounter(merge(b, report(1_025, 4, 1_025)), b.lastId + 40, NOW_MS), true],
    ['a per-caller snapshot', (b) => merge(b, snapshot(1_012, [[2, p(1_011)]], false)), true],
    ['a copy read whole (every user differs, a small realm)', (b) => decodeLedger(encodeLedger(merge(b, report(1_025, 4, 1_025)))), true],
    ['another complete snapshot (who is out of view moved): merged again', (b) => merge(b, snapshot(1_015, [[1, p(1_014)]])), false],
    ['a new epoch (the ledger replaced: evicted, a failover): merged again', () => createLedger(NOW_MS + 1), false],
  ])('%s', async (_case, between, rebases) => {
    const base = realm(8);
    const obs = refresh(base);
    const prepared = await prepareMerge(base, obs, noPause);
    const now = between(base);
    const rebased = rebasedMerge(now, obs, prepared);
    expect(rebased !== undefined).toBe(rebases);
    const full = merge(now, obs);
    expect(plainLedger(applyChange(now, { kind: 'observation', observation: obs, prepared }, NOW_MS))).toEqual(
      plainLedger(rebased ?? full),
    );
    if (rebased) expectSameForClients(rebased, full, [base, now]);
  });

  it('ids: the refresh takes the ids after every one issued in between, in its order; a user of both the next', async () => {
    const base = realm(8);
    const obs = refresh(base);
    const prepared = await prepareMerge(base, obs, noPause);
    const now = merge(merge(base, report(1_015, 1, 1_015)), report(1_025, 6, 1_025));
    const rebased = rebasedMerge(now, obs, prepared)!;
    const at = (u: number) => rebased.users.get(u)!.changedAt;
    // User 6: its report is newer than the refresh, which changes nothing of it (I3): its id kept.
    expect(rebased.users.get(6)).toMatchObject({ active: 1_025, changedAt: now.users.get(6)!.changedAt });
    // User 2 (the refresh alone): the first id above the reports'. User 1: the report's active
    // time and the refresh's later idle time (I8), the next id.
    expect(at(2)).toBe(now.lastId + 1);
    expect(rebased.users.get(1)).toMatchObject({ active: 1_015, idle: 1_018, present: true });
    expect(at(1)).toBe(now.lastId + 2);
    expect(rebased.lastId).toBe(now.lastId + 2);
    // User 3, left out: out of view, its id kept.
    expect(rebased.users.get(3)).toMatchObject({ present: false, changedAt: base.users.get(3)!.changedAt });
    // A client at the last report's id gets the refresh, and nothing it has already.
    expect(answer(rebased, { lastUpdateId: now.lastId, serverTimestamp: 1_020 }).presences).toEqual({
      '1': { active_timestamp: 1_015, idle_timestamp: 1_018 },
      '2': { active_timestamp: 1_019, idle_timestamp: 1_019 },
    });
  });

  it('more users changed in between than REBASE_LIMIT (10,000): merged again', async () => {
    const base = realm(10_500);
    const obs = refresh(base);
    const prepared = await prepareMerge(base, obs, noPause);
    const now = merge(
      base,
      snapshot(
        1_015,
        [...base.users.keys()].map((u): [number, ModernPresence] => [u, p(1_001 + u)]),
        false,
      ),
    );
    expect(rebasedMerge(now, obs, prepared)).toBeUndefined();
  });

  it('a prepared merge that started a new epoch (the upstream clock stepped back, X14) is not rebased', async () => {
    const base = merge(createLedger(NOW_MS), snapshot(10_000, [[1, p(9_000)]]));
    const obs = { ...snapshot(10_000 - 3_600, [[1, p(6_000)]]), maxLateSeconds: 180 };
    const prepared = await prepareMerge(base, obs, noPause);
    expect(prepared.next.epoch).toBeGreaterThan(base.lastId);
    const now = merge(base, report(10_001, 2, 10_001));
    expect(rebasedMerge(now, obs, prepared)).toBeUndefined();
    expect(plainLedger(applyChange(now, { kind: 'observation', observation: obs, prepared }, NOW_MS))).toEqual(
      plainLedger(merge(now, obs)),
    );
  });

  it('the memory store rebases a prepared merge over a report that reached it meanwhile', async () => {
    const store = new MemoryStore({ maxRealms: 4, maxBytes: 64 * 2 ** 20 }, () => NOW_MS);
    const base = await store.merge(
      'realm',
      snapshot(
        1_010,
        Array.from({ length: 8 }, (_, i) => [i + 1, p(901 + i)]),
      ),
    );
    const obs = refresh(base);
    const prepared = await prepareMerge(base, obs, noPause);
    const now = await store.merge('realm', report(1_015, 1, 1_015));
    const stored = await store.merge('realm', obs, prepared);
    // The rebase's ids (user 1 after the refresh's own), not a merge made again (user 1 first).
    expect(plainLedger(stored)).toEqual(plainLedger(rebasedMerge(now, obs, prepared)));
    expect(stored.users.get(1)!.changedAt).toBeGreaterThan(stored.users.get(2)!.changedAt);
    const full = merge(now, obs);
    expect(full.users.get(1)!.changedAt).toBeLessThan(full.users.get(2)!.changedAt);
  });
});

describe('a prepared merge in steps (B7)', () => {
  it('offers its caller a pause every 1,000 users looked at, and makes the same merge whichever pauses are taken', async () => {
    const base = realm(5_000);
    const obs = snapshot(
      1_020,
      [...base.users.keys()].filter((u) => u % 7 !== 0).map((u): [number, ModernPresence] => [u, p(u % 3 === 0 ? 1_019 : 900 + u)]),
    );
    let offered = 0;
    const prepared = await prepareMerge(base, obs, () => (++offered % 2 === 0 ? Promise.resolve() : undefined));
    // The observation's users, then the ledger's for who was left out: 5,000 + 5,000 looked at.
    expect(offered).toBeGreaterThanOrEqual(9);
    expect(plainLedger(prepared.next)).toEqual(plainLedger(merge(base, obs)));
  });
});
