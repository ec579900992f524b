import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  answer,
  answerId,
  answerIdWithoutLedger,
  answersWithDelta,
  applyChange,
  createLedger,
  idAsOf,
  legacyAnswerId,
  merge,
  prepareMerge,
  RAISES_PER_MINUTE,
  raiseCounter,
  upstreamOrder,
  vouchesFor,
  type LedgerState,
  type ModernPresence,
} from '../src/presence/ledger.js';
import { plainLedger } from './support/ledgers.js';

/**
 * P3–P7 as properties of the pure ledger. A model upstream changes users' presence (including
 * invisible-mode backdating to smaller timestamps, and users leaving and re-entering the
 * 14-day window); snapshots of it reach the ledger, sometimes late and out of order; clients
 * poll with the last id they got and apply each answer (replace on full data, merge on a
 * delta); the shim restarts or loses its store now and then.
 */

type Step =
  | { t: 'change'; user: number; active: number; idle: number }
  | { t: 'backdate'; user: number }
  | { t: 'leave'; user: number }
  | { t: 'snapshot' }
  | { t: 'late'; back: number }
  | { t: 'poll'; client: number }
  | { t: 'forge'; back: number; keep: boolean }
  | { t: 'dated' }
  | { t: 'restart' };

const USERS = 6;
const CLIENTS = 3;

const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ t: fc.constant('change' as const), user: fc.nat(USERS - 1), active: fc.nat(50), idle: fc.nat(50) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('backdate' as const), user: fc.nat(USERS - 1) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('leave' as const), user: fc.nat(USERS - 1) }) },
  { weight: 3, arbitrary: fc.constant({ t: 'snapshot' as const }) },
  { weight: 1, arbitrary: fc.constant({ t: 'dated' as const }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('late' as const), back: fc.integer({ min: 1, max: 4 }) }) },
  { weight: 5, arbitrary: fc.record({ t: fc.constant('poll' as const), client: fc.nat(CLIENTS - 1) }) },
  {
    weight: 2,
    arbitrary: fc.record({ t: fc.constant('forge' as const), back: fc.integer({ min: 1, max: 20_000 }), keep: fc.boolean() }),
  },
  { weight: 1, arbitrary: fc.constant({ t: 'restart' as const }) },
);

interface Snap {
  ts: number;
  data: Map<number, ModernPresence>;
}

function run(steps: Step[]) {
  let clock = 1_000_000; // ms, the shim's clock; only used for epochs
  let upTime = 100; // the upstream's clock (server_timestamp), unrelated to the shim's
  let base = 1_000; // upstream timestamps grow with its time
  const upstream = new Map<number, ModernPresence>();
  const history: Snap[] = [];
  let ledger: LedgerState = createLedger(clock);
  let lastSnap: Snap | undefined;
  const issued: number[] = [];
  const perClient: number[][] = Array.from({ length: CLIENTS }, () => []);
  const lastIds: number[] = [];
  const clients = Array.from({ length: CLIENTS }, () => ({ id: undefined as number | undefined, map: new Map<number, ModernPresence>() }));
  /** A caller that sends made-up ids the clock allows, or goes on from the id it was given (X1, I6). */
  const forger = { id: undefined as number | undefined, map: new Map<number, ModernPresence>() };

  /**
   * The forger's poll, as answers.ts makes it: delta or full decided on the ledger before any
   * raise, the counter raised past a plausible id it cannot vouch for. A raise costs the forger
   * only: every other client's answer is the same with it as without it.
   */
  const forge = (s: Snap, sent: number) => {
    const delta = answersWithDelta(ledger, sent);
    if (!delta && sent > ledger.lastId) {
      const raised = raiseCounter(ledger, sent, clock);
      for (const c of clients) {
        const q = { visible: s.data.keys(), lastUpdateId: c.id, serverTimestamp: s.ts };
        if (c.id !== undefined && vouchesFor(ledger, c.id))
          expect(answer(raised, q)).toEqual(answer(ledger, { ...q, visible: s.data.keys() }));
      }
      ledger = raised;
      lastIds.push(ledger.lastId);
    }
    const a = answer(ledger, { visible: s.data.keys(), lastUpdateId: sent, delta, serverTimestamp: s.ts });
    expect(a.presenceLastUpdateId).toBeGreaterThanOrEqual(sent); // X1
    if (forger.id !== undefined && sent === forger.id) expect(a.presenceLastUpdateId).toBeGreaterThanOrEqual(forger.id);
    const got = new Map(Object.entries(a.presences).map(([k, v]) => [Number(k), v]));
    if (a.full) forger.map = got;
    else for (const [k, v] of got) forger.map.set(k, v);
    forger.id = a.presenceLastUpdateId;
    if (a.presenceLastUpdateId > 0 && got.size) issued.push(a.presenceLastUpdateId);
    for (const [k, v] of s.data) expect(forger.map.get(k)).toEqual(v); // P6 for the forger too
  };

  /** A register dated by its Date header was just taken: the next snapshot is of its second (P6). */
  let inDatedSecond = false;
  const takeSnapshot = (): Snap => {
    if (!inDatedSecond) upTime += 1;
    const s = { ts: inDatedSecond ? upTime + 0.5 : upTime, data: new Map([...upstream].map(([k, v]) => [k, { ...v }])) };
    inDatedSecond = false;
    history.push(s);
    return s;
  };
  const feed = (s: Snap) => {
    ledger = merge(ledger, { serverTimestamp: s.ts, presences: s.data, complete: true });
    lastIds.push(ledger.lastId);
    if (!lastSnap || s.ts >= lastSnap.ts) lastSnap = s;
  };

  for (const st of steps) {
    clock += 7;
    switch (st.t) {
      case 'change': {
        // The upstream's time moves on: a user's newer active time is later than every earlier
        // one (P14 keeps the later one where an old server's rows show an earlier one).
        base += 60;
        const active = base + st.active;
        upstream.set(st.user, { active_timestamp: active, idle_timestamp: active + st.idle });
        break;
      }
      case 'backdate': {
        // Invisible mode: the server rewrites the user's row to older timestamps.
        const prev = upstream.get(st.user);
        if (prev) upstream.set(st.user, { active_timestamp: prev.active_timestamp - 265, idle_timestamp: prev.active_timestamp - 265 });
        break;
      }
      case 'leave':
        upstream.delete(st.user); // out of the 14-day window, deactivated, …
        break;
      case 'snapshot':
        feed(takeSnapshot());
        break;
      case 'dated': {
        // An answer dated by its Date header (a register before feature level 70): at the end of
        // a new second, in which the next snapshot is taken, after it, with an earlier
        // server_timestamp (issue 43). Not replayed late: one arriving after an answer of its
        // second with a server_timestamp is merged with it by their data (ledger.ts
        // `upstreamOrder`), which can take back a backdating in that second: the limit of a Date header.
        upTime += 1;
        ledger = merge(ledger, { serverTimestamp: upTime + 0.999, presences: new Map(upstream), complete: true, dateTimed: true });
        lastIds.push(ledger.lastId);
        inDatedSecond = true;
        break;
      }
      case 'late': {
        // An older snapshot arrives after newer ones (a slow fetch): it must change nothing.
        const s = history[history.length - 1 - st.back];
        const newest = ledger.merges[ledger.merges.length - 1]?.[0];
        if (s && newest !== undefined && newest > s.ts) {
          const before = ledger;
          ledger = merge(ledger, { serverTimestamp: s.ts, presences: s.data, complete: true });
          expect([...ledger.users]).toEqual([...before.users]);
          expect(ledger.lastId).toBe(before.lastId);
        }
        break;
      }
      case 'poll': {
        const s = takeSnapshot();
        feed(s);
        const c = clients[st.client]!;
        const a = answer(ledger, { visible: s.data.keys(), lastUpdateId: c.id, serverTimestamp: s.ts });
        const got = new Map(Object.entries(a.presences).map(([k, v]) => [Number(k), v]));
        // P7: nothing outside the snapshot's view.
        for (const k of got.keys()) expect(s.data.has(k)).toBe(true);
        if (a.full) c.map = got;
        else for (const [k, v] of got) c.map.set(k, v);
        // P4.
        if (got.size === 0) expect(a.presenceLastUpdateId).toBe(c.id ?? -1);
        else expect(a.presenceLastUpdateId).toBe(Math.max(...Object.keys(a.presences).map((k) => ledger.users.get(Number(k))!.changedAt)));
        c.id = a.presenceLastUpdateId;
        if (a.presenceLastUpdateId > 0 && got.size) issued.push(a.presenceLastUpdateId);
        perClient[st.client]!.push(a.presenceLastUpdateId);
        // P6: after every poll the client holds exactly the upstream's data for every user it
        // can see now.
        for (const [k, v] of s.data) expect(c.map.get(k)).toEqual(v);
        break;
      }
      case 'forge': {
        const s = takeSnapshot();
        feed(s);
        // Made up: the clock in µs less a little (plausible, above the counter unless it just
        // moved), or the id it was given last.
        const sent = st.keep && forger.id !== undefined ? forger.id : clock * 1000 - st.back;
        // A made-up id the ledger vouches for (just after a restart, the clock in µs less a
        // little is an id it issued) cannot be told from one it gave: that caller gets the
        // delta it asked for and holds what it lied about. Only the forger can be misled so, and
        // the property is about ids the ledger cannot vouch for.
        if (sent !== forger.id && vouchesFor(ledger, sent)) break;
        forge(s, sent);
        break;
      }
      case 'restart':
        // A restart or a lost store: a new ledger from the clock; earlier ids must not be vouched for.
        ledger = createLedger(clock);
        lastIds.push(ledger.lastId);
        for (const id of issued) expect(vouchesFor(ledger, id)).toBe(false);
        break;
    }
  }
  return { ledger, issued, perClient, lastIds };
}

describe('presence ledger properties (P3–P7)', () => {
  it('no update is lost and nothing goes backwards, for any interleaving', () => {
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 80 }), (steps) => {
        run(steps);
      }),
      { numRuns: 5000 },
    );
  });

  it('ids only grow: per realm across restarts, and per client', () => {
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 80 }), (steps) => {
        const { perClient, lastIds, issued } = run(steps);
        // The realm's newest id never goes back, also across restarts and lost stores (P5).
        for (let i = 1; i < lastIds.length; i++) expect(lastIds[i]!).toBeGreaterThanOrEqual(lastIds[i - 1]!);
        // A client that only ever sent ids it was given never gets a smaller one back.
        for (const ids of perClient) for (let i = 1; i < ids.length; i++) expect(ids[i]!).toBeGreaterThanOrEqual(ids[i - 1]!);
        for (const id of issued) expect(Number.isSafeInteger(id)).toBe(true);
      }),
      { numRuns: 1000 },
    );
  });
});

describe('ledger rules', () => {
  const p = (a: number, i: number): ModernPresence => ({ active_timestamp: a, idle_timestamp: i });
  const obs = (ts: number, entries: Array<[number, ModernPresence]>, complete = true) => ({
    serverTimestamp: ts,
    presences: new Map(entries),
    complete,
  });

  it('a newer observation wins even with smaller timestamps (invisible mode, P6)', () => {
    let l = createLedger(5_000);
    l = merge(l, obs(10, [[1, p(900, 950)]]));
    const first = l.users.get(1)!.changedAt;
    l = merge(l, obs(11, [[1, p(600, 600)]]));
    expect(l.users.get(1)).toMatchObject({ active: 600, idle: 600 });
    expect(l.users.get(1)!.changedAt).toBeGreaterThan(first);
  });

  it('the upstream clock stepping back past what a late answer can be starts a new epoch above every id (X14)', () => {
    let l = createLedger(5_000);
    l = merge(l, obs(10_000, [[1, p(9_900, 9_950)]]));
    const before = l;
    // Late by less than the tolerance: an old answer, changing nothing.
    expect(merge(l, obs(10_000 - 100, [[1, p(9_000, 9_000)]], true))).toBe(before);
    // An hour back: the upstream's clock moved, not the answer.
    l = merge(l, { ...obs(10_000 - 3_600, [[1, p(6_390, 6_399)]]), maxLateSeconds: 180 });
    expect(l.epoch).toBeGreaterThan(before.lastId);
    expect(vouchesFor(l, before.lastId)).toBe(false); // every client id gets full data (P5)
    expect(l.users.get(1)).toMatchObject({ active: 6_390, idle: 6_399 });
    // Changes flow again on the new time.
    const next = merge(l, obs(10_000 - 3_590, [[1, p(6_405, 6_405)]]));
    expect(next.users.get(1)).toMatchObject({ active: 6_405 });
    expect(answer(next, { visible: [1], lastUpdateId: l.lastId, serverTimestamp: 6_410 }).presences).toEqual({
      '1': { active_timestamp: 6_405, idle_timestamp: 6_405 },
    });
  });

  it('an answer timed by a skewed Date header (a report, an old register) never starts a new epoch (X14 reads server_timestamp merges)', () => {
    let l = createLedger(5_000);
    l = merge(l, obs(10_000, [[1, p(9_900, 9_950)]]));
    // A front proxy's clock ten minutes ahead of the upstream's.
    l = merge(l, { ...obs(10_600.999, [[2, p(10_600, 10_600)]], false), report: true });
    // A register before feature level 70, timed by the same skewed Date header.
    l = merge(l, { ...obs(10_601.999, [[1, p(9_900, 9_990)]]), dateTimed: true });
    const next = merge(l, obs(10_005, [[1, p(9_900, 10_004)]], false));
    expect(next.epoch).toBe(l.epoch);
    // What the skewed answer showed is held until the upstream's clock passes it: the skew's
    // cost, bounded by it (a Date header on the upstream's own machine has none).
    expect(next.users.get(1)).toMatchObject({ idle: 9_990 });
  });

  it('an older snapshot arriving late changes nothing (ordered by server_timestamp)', () => {
    let l = createLedger(5_000);
    l = merge(l, obs(20, [[1, p(900, 950)]]));
    const again = merge(l, obs(19, [[1, p(100, 100)]]));
    expect(again).toBe(l);
  });

  // A register before 5.0 is timed by its Date header, to the second: two of them in one second
  // carry the same server_timestamp. The newer data must win whichever arrives first (P6, I3).
  it.each([
    ['in upstream order', false],
    ['in reverse order', true],
  ])('two snapshots at the same server_timestamp, arriving %s: the newer data wins', (_order, reversed) => {
    const earlier = obs(100, [[1, p(90, 95)]]);
    const later = obs(100, [[1, p(99, 99)]]);
    let l = createLedger(5_000);
    l = merge(l, obs(50, [[1, p(40, 45)]]));
    const [first, second] = reversed ? [later, earlier] : [earlier, later];
    const once = merge(l, first);
    const both = merge(once, second);
    expect(both.users.get(1)).toMatchObject({ active: 99, idle: 99, present: true });
    // A client that got the first one's id gets the newer data in its delta, if there is any.
    const delta = answer(both, { visible: [1], lastUpdateId: once.lastId, serverTimestamp: 100 });
    expect(delta.presences).toEqual(reversed ? {} : { '1': { active_timestamp: 99, idle_timestamp: 99 } });
  });

  // Issue 43: a register below feature level 70 is dated at the end of its Date second; a poll's
  // answer of that second carries an earlier server_timestamp. Neither outranks the other (P6, I3).
  it.each([
    ['the register first', false],
    ['the poll first', true],
  ])('a register dated by its Date header and a poll of the same second, %s: the poll is not older', (_order, pollFirst) => {
    const register = { ...obs(1_000.999, [[1, p(900, 900)]]), dateTimed: true };
    // The poll came after the register: user 1 reported since, user 2 came into view.
    const polled = obs(1_000.55, [
      [1, p(1_000, 1_000)],
      [2, p(1_000, 1_000)],
    ]);
    let l = merge(createLedger(5_000), obs(990.5, [[1, p(900, 900)]]));
    l = pollFirst ? merge(merge(l, polled), register) : merge(merge(l, register), polled);
    expect(l.users.get(1)).toMatchObject({ active: 1_000, idle: 1_000, present: true });
    expect(l.users.get(2)).toMatchObject({ active: 1_000, idle: 1_000, present: true });
    // Two answers with server_timestamps in one second are ordered as ever: the older changes nothing.
    const older = merge(l, obs(1_000.2, [[1, p(950, 950)]]));
    expect(older.users.get(1)).toMatchObject({ active: 1_000, idle: 1_000 });
    // The next second is ordered again: a backdated user (invisible mode) is taken as it is.
    const next = merge(l, obs(1_001.1, [[1, p(600, 600)]]));
    expect(next.users.get(1)).toMatchObject({ active: 600, idle: 600 });
    // So is one backdated in the poll of the register's second: the register never outranks it.
    const hidden = merge(merge(createLedger(5_000), register), obs(1_000.55, [[1, p(600, 600)]]));
    expect(hidden.users.get(1)).toMatchObject({ active: 600, idle: 600 });
  });

  it.each([
    [1_000.999, 1_000.2, 'tie'],
    [1_000.2, 1_000.999, 'after'],
    [1_000.2, 1_000.7, 'before'],
    [1_000.999, 1_001.2, 'before'],
    [1_001.2, 1_000.999, 'after'],
    [1_000.999, 1_000.999, 'tie'],
    [1_000.5, 1_000.5, 'tie'],
  ] as const)('upstream time %s against one held from %s: %s (P6, I3)', (ts, seenAt, order) => {
    expect(upstreamOrder(ts, seenAt)).toBe(order);
  });

  it('snapshots at one server_timestamp leave the same data whatever order they arrive in', () => {
    const presence = fc.record({ active: fc.nat(100), extra: fc.nat(10) }).map(({ active, extra }) => p(active, active + extra));
    fc.assert(
      fc.property(fc.array(fc.array(fc.tuple(fc.nat(4), presence), { maxLength: 5 }), { minLength: 2, maxLength: 4 }), (snaps) => {
        const merged = (order: typeof snaps) => order.reduce((l, entries) => merge(l, obs(100, entries, false)), createLedger(5_000));
        const data = (l: LedgerState) => new Map([...l.users].map(([id, e]) => [id, [e.active, e.idle]]));
        expect(data(merged([...snaps].reverse()))).toEqual(data(merged(snaps)));
      }),
    );
  });

  it('the same snapshot merged twice issues no new id', () => {
    let l = createLedger(5_000);
    l = merge(l, obs(20, [[1, p(900, 950)]]));
    expect(merge(l, obs(20, [[1, p(900, 950)]])).lastId).toBe(l.lastId);
    expect(merge(l, obs(21, [[1, p(900, 950)]])).lastId).toBe(l.lastId);
  });

  it('a user coming back into view is a change (P6 for clients that replaced their map)', () => {
    let l = createLedger(5_000);
    l = merge(
      l,
      obs(10, [
        [1, p(1, 2)],
        [2, p(3, 4)],
      ]),
    );
    l = merge(l, obs(11, [[1, p(1, 2)]]));
    expect(l.users.get(2)!.present).toBe(false);
    const before = l.lastId;
    l = merge(
      l,
      obs(12, [
        [1, p(1, 2)],
        [2, p(3, 4)],
      ]),
    );
    expect(l.users.get(2)).toMatchObject({ present: true, changedAt: before + 1 });
  });

  it('a late snapshot does not bring back a user a newer complete one left out, even one the ledger never saw', () => {
    // After a restart the ledger is empty; the newest snapshot (ts 12) shows nobody, then an
    // older one (ts 11) with user 1 arrives. User 1 must not count as in view: when they come
    // back unchanged, clients that replaced their map must still get them.
    let l = createLedger(5_000);
    l = merge(l, obs(12, []));
    l = merge(l, obs(11, [[1, p(1, 2)]]));
    expect(l.users.has(1)).toBe(false);
    const before = l.lastId;
    l = merge(l, obs(13, [[1, p(1, 2)]]));
    expect(l.users.get(1)!.changedAt).toBe(before + 1);
  });

  it('a per-caller (incomplete) snapshot says nothing about users it leaves out', () => {
    let l = createLedger(5_000);
    l = merge(
      l,
      obs(10, [
        [1, p(1, 2)],
        [2, p(3, 4)],
      ]),
    );
    l = merge(l, obs(11, [[1, p(1, 2)]], false));
    expect(l.users.get(2)!.present).toBe(true);
  });

  it('answers follow P3/P4 exactly', () => {
    let l = createLedger(5_000);
    expect(answer(l, { visible: [], lastUpdateId: undefined, serverTimestamp: 1 })).toEqual({
      presences: {},
      presenceLastUpdateId: -1,
      full: true,
    });
    expect(answer(l, { visible: [], lastUpdateId: -1, serverTimestamp: 1 }).presenceLastUpdateId).toBe(-1);
    l = merge(
      l,
      obs(10, [
        [1, p(1, 2)],
        [2, p(3, 4)],
      ]),
    );
    const full = answer(l, { visible: [1, 2], lastUpdateId: -1, serverTimestamp: 10 });
    expect(Object.keys(full.presences)).toEqual(['1', '2']);
    expect(full.presenceLastUpdateId).toBe(l.lastId);
    // Nothing changed since: empty delta, the client's own id echoed.
    expect(answer(l, { visible: [1, 2], lastUpdateId: l.lastId, serverTimestamp: 10 })).toEqual({
      presences: {},
      presenceLastUpdateId: l.lastId,
      full: false,
    });
    // An id from the future, from before the epoch, or garbage: full data (P5).
    for (const bad of [l.lastId + 1, l.epoch, 3, 2 ** 63]) {
      expect(answer(l, { visible: [1, 2], lastUpdateId: bad, serverTimestamp: 10 }).full).toBe(true);
    }
  });

  it('history_limit_days applies to full answers only (P12)', () => {
    let l = createLedger(5_000);
    const day = 86_400;
    l = merge(
      l,
      obs(100 * day, [
        [1, p(99 * day, 99 * day)],
        [2, p(50 * day, 50 * day)],
      ]),
    );
    const q = { visible: [1, 2], serverTimestamp: 100 * day };
    expect(Object.keys(answer(l, { ...q, lastUpdateId: undefined, historyLimitDays: 10 }).presences)).toEqual(['1']);
    expect(Object.keys(answer(l, { ...q, lastUpdateId: undefined, historyLimitDays: 0 }).presences)).toEqual([]);
    expect(answer(l, { ...q, lastUpdateId: undefined, historyLimitDays: 0 }).presenceLastUpdateId).toBe(-1);
    expect(Object.keys(answer(l, { ...q, lastUpdateId: l.epoch + 1, historyLimitDays: 0 }).presences)).toEqual(['2']);
    // An id > 0 the ledger cannot vouch for: full data, and the limit ignored as a modern server does.
    for (const unvouched of [l.lastId + 1, l.epoch]) {
      const resync = answer(l, { ...q, lastUpdateId: unvouched, historyLimitDays: 0 });
      expect(resync.full).toBe(true);
      expect(Object.keys(resync.presences)).toEqual(['1', '2']);
    }
    // -1 asks for full data as absence does: the limit applies.
    expect(Object.keys(answer(l, { ...q, lastUpdateId: -1, historyLimitDays: 10 }).presences)).toEqual(['1']);
  });

  it('a new ledger starts above every id an earlier one issued, even on a stuck clock', () => {
    let l = createLedger(5_000);
    for (let i = 0; i < 5; i++) l = merge(l, obs(10 + i, [[1, p(i, i)]]));
    expect(createLedger(5_000, l.lastId).epoch).toBeGreaterThanOrEqual(l.lastId);
    expect(vouchesFor(createLedger(5_000, l.lastId), l.lastId)).toBe(false);
  });

  it('idAsOf gives the id after the newest merge not newer than an answer', () => {
    let l = createLedger(5_000);
    l = merge(l, obs(10, [[1, p(1, 1)]]));
    const at10 = l.lastId;
    l = merge(l, obs(20, [[1, p(2, 2)]]));
    expect(idAsOf(l, 15)).toBe(at10);
    expect(idAsOf(l, 25)).toBe(l.lastId);
    expect(idAsOf(l, 5)).toBe(-1);
  });

  it('raises the counter only to a plausible id, and never answers below the client’s id (X1, I6)', () => {
    let l = createLedger(5_000); // epoch 5,000,000 µs
    l = merge(l, obs(10, [[1, p(1, 2)]]));
    l = merge(l, obs(11, [[2, p(3, 4)]], false));
    const issued = l.users.get(1)!.changedAt;
    expect(raiseCounter(l, l.lastId - 1, 6_000)).toBe(l); // not above the counter
    expect(raiseCounter(l, 7_000_000, 6_000)).toBe(l); // beyond the clock: implausible
    const raised = raiseCounter(l, 5_900_000, 6_000);
    // Past the id, with no user stamped anew: the ids raised past are vouched for by nobody.
    expect(raised.lastId).toBe(5_900_001);
    expect(plainLedger(raised)?.users).toEqual(plainLedger(l)?.users);
    expect(vouchesFor(raised, 5_900_000)).toBe(false);
    expect(vouchesFor(raised, issued)).toBe(true);
    // The full answer for the raising id carries the raise's mark; the next delta from it is exact.
    const full = answer(raised, { visible: [1, 2], lastUpdateId: 5_900_000, delta: false, serverTimestamp: 11 });
    expect(full).toMatchObject({ full: true, presenceLastUpdateId: 5_900_001 });
    expect(Object.keys(full.presences)).toEqual(['1', '2']);
    expect(answer(raised, { visible: [1, 2], lastUpdateId: 5_900_001, serverTimestamp: 11 }).presences).toEqual({});
    const changed = merge(raised, obs(12, [[1, p(3, 4)]]));
    expect(answer(changed, { visible: [1], lastUpdateId: 5_900_001, serverTimestamp: 12 })).toMatchObject({
      full: false,
      presenceLastUpdateId: 5_900_002,
    });
    // Another client that was echoed 5,900,000 (or any id the ledger was raised past) with older
    // data gets full data, and the mark: nothing it missed is lost (P6).
    for (const held of [5_900_000, 5_500_000]) {
      expect(answer(changed, { visible: [1, 2], lastUpdateId: held, serverTimestamp: 12 })).toMatchObject({
        full: true,
        presenceLastUpdateId: 5_900_002,
      });
      expect(answer(raised, { visible: [1, 2], lastUpdateId: held, serverTimestamp: 11 }).presenceLastUpdateId).toBe(5_900_001);
    }
    // Everyone else's delta is what it was without the raise (I6: a raise costs its caller only).
    expect(answer(raised, { lastUpdateId: issued, serverTimestamp: 11 })).toEqual(answer(l, { lastUpdateId: issued, serverTimestamp: 11 }));
    // A ledger with nobody in view moves its counter the same way.
    expect(raiseCounter(createLedger(5_000), 5_900_000, 6_000).lastId).toBe(5_900_001);
    // Implausible: echoed with full data, the counter untouched.
    const echoed = answer(l, { visible: [1], lastUpdateId: 2 ** 52, serverTimestamp: 10 });
    expect(echoed).toMatchObject({ full: true, presenceLastUpdateId: 2 ** 52 });
  });

  it('raises a realm’s counter at most RAISES_PER_MINUTE times a minute, and keeps a bounded list of them (I6)', () => {
    let l = merge(createLedger(5_000), obs(10, [[1, p(1, 2)]]));
    let nowMs = 6_000;
    const raises: number[] = [];
    for (let i = 0; i < RAISES_PER_MINUTE + 3; i++) {
      const before = l;
      l = raiseCounter(l, l.lastId + 1_000, nowMs);
      if (l !== before) raises.push(l.lastId);
      nowMs += 1_000;
    }
    expect(raises).toHaveLength(RAISES_PER_MINUTE);
    // Past it: the same state, so that id stays unvouched and gets full data, echoed.
    const refused = l.lastId + 1_000;
    expect(raiseCounter(l, refused, nowMs)).toBe(l);
    expect(answer(l, { visible: [1], lastUpdateId: refused, serverTimestamp: 10 })).toMatchObject({
      full: true,
      presenceLastUpdateId: refused,
    });
    // A minute later the realm may raise again.
    expect(raiseCounter(l, refused, nowMs + 60_000).lastId).toBe(refused + 1);
    // However many raises: the list stays bounded, every mark and issued id in it stays exact or
    // is vouched for by nobody (full data), never a delta that could miss something.
    const marks: number[] = [];
    for (let i = 0; i < 300; i++) {
      nowMs += 60_000;
      l = raiseCounter(l, l.lastId + 1_000, nowMs);
      marks.push(l.lastId);
      l = merge(l, obs(11 + i, [[1, p(10 + i, 10 + i)]]));
    }
    expect(l.raised.length).toBeLessThanOrEqual(64);
    for (const [after, upTo] of l.raised) for (const id of [after + 1, upTo]) expect(vouchesFor(l, id)).toBe(false);
    expect(marks.slice(-10).every((m) => vouchesFor(l, m))).toBe(true);
  });

  it('gives a legacy answer -1 only when it shows nobody (P4)', () => {
    let l = createLedger(5_000);
    // Not merged (7.0–8.x), nothing merged as old as the answer: the epoch, which vouches for nothing.
    expect(legacyAnswerId(l, { merged: false, serverTimestamp: 10, empty: false })).toBe(l.epoch);
    expect(vouchesFor(l, l.epoch)).toBe(false);
    expect(legacyAnswerId(l, { merged: false, serverTimestamp: 10, empty: true })).toBe(-1);
    l = merge(l, obs(10, [[1, p(1, 2)]]));
    expect(legacyAnswerId(l, { merged: false, serverTimestamp: 12, empty: false })).toBe(l.lastId);
    expect(legacyAnswerId(l, { merged: true, visible: [1], serverTimestamp: 10, empty: false })).toBe(l.users.get(1)!.changedAt);
  });

  // P4, P5, I6 with and without a ledger (store down: full data, no user's id known).
  it.each([
    // lastUpdateId, largest id returned (ledger), with a ledger, without one
    [undefined, -1, -1, -1],
    [undefined, 7, 7, -1],
    [-1, -1, -1, -1],
    [0, -1, 0, -1],
    [0, 7, 7, -1],
    [5, -1, 5, 5],
    [5, 7, 7, 5],
    [9, 7, 9, 9],
  ] as const)('P4: last_update_id %s, largest returned %s: %s with a ledger, %s without', (lastUpdateId, largest, withLedger, without) => {
    expect(answerId(largest, lastUpdateId)).toBe(withLedger);
    expect(answerIdWithoutLedger(lastUpdateId)).toBe(without);
  });
});

describe('ledger structure (B7): shared users, delta index', () => {
  const obsArb = fc.record({
    complete: fc.boolean(),
    users: fc.array(fc.tuple(fc.nat(700), fc.nat(40), fc.nat(40)), { maxLength: 120 }),
    fork: fc.boolean(),
    reload: fc.boolean(),
  });

  const sameDeltas = (k: LedgerState, ts: number) => {
    const everyone = [...k.users.keys()];
    for (let id = k.epoch + 1; id <= k.lastId; id += Math.max(1, Math.floor((k.lastId - k.epoch) / 25))) {
      const q = { lastUpdateId: id, serverTimestamp: ts };
      expect(answer(k, q)).toEqual(answer(k, { ...q, visible: everyone }));
    }
  };

  it('a delta by the change index is exactly a delta by scanning every user, and earlier states never change', () => {
    fc.assert(
      fc.property(fc.array(obsArb, { minLength: 1, maxLength: 40 }), (steps) => {
        let state = createLedger(1_000_000);
        let ts = 100;
        const kept: Array<{ state: LedgerState; users: Array<[number, unknown]> }> = [];
        for (const s of steps) {
          const presences = new Map(s.users.map(([u, a, i]) => [u, { active_timestamp: a + ts, idle_timestamp: a + i + ts }] as const));
          const next = merge(state, { serverTimestamp: ++ts, presences, complete: s.complete });
          // A second state made from the same parent (a store's retry) must not disturb the first.
          const shifted = new Map(
            [...presences].map(
              ([u, p]) => [u + 1, { active_timestamp: p.active_timestamp + 1, idle_timestamp: p.idle_timestamp + 1 }] as const,
            ),
          );
          const fork = s.fork ? merge(state, { serverTimestamp: ts, presences: shifted, complete: !s.complete }) : undefined;
          for (const made of [next, fork]) if (made) kept.push({ state: made, users: [...made.users].map(([u, e]) => [u, { ...e }]) });
          // Either goes on; a state read back from a store has no index until a delta asks for one.
          const chosen = fork && s.users.length % 2 === 1 ? fork : next;
          state = s.reload ? { ...chosen } : chosen;
          // Asked as it goes, so the index is built early and extended by the merges after.
          sameDeltas(state, ts);
        }
        for (const { state: k, users } of kept) {
          expect([...k.users].map(([u, e]) => [u, { ...e }])).toEqual(users);
          sameDeltas(k, ts);
        }
      }),
      { numRuns: 60 },
    );
  });
});

describe('merges in steps (B7)', () => {
  const snapshot = (ts: number, users: number, shift: number) => ({
    serverTimestamp: ts,
    complete: true,
    presences: new Map<number, ModernPresence>(
      Array.from({ length: users }, (_, i) => [i + 1, { active_timestamp: 100 + ((i * shift) % 7), idle_timestamp: 200 + i }] as const),
    ),
  });

  it('gives exactly the merge, pausing on a large realm; a store takes it as it is only on the state it was made on (I7)', async () => {
    const base = merge(createLedger(1_000_000), snapshot(10, 25_000, 1));
    const obs = snapshot(11, 24_000, 2); // changes some users, leaves 1,000 out
    let pauses = 0;
    const prepared = await prepareMerge(base, obs, async () => pauses++);
    const { next } = prepared;
    expect(pauses).toBeGreaterThanOrEqual(4);
    expect(plainLedger(next)).toEqual(plainLedger(merge(base, obs)));
    expect(applyChange(base, { kind: 'observation', observation: obs, prepared }, 0)).toBe(next);
    // Another complete snapshot came in between: merged again on that state, never the stale
    // result (test/ledger-rebase.property.test.ts: the changes a prepared merge is rebased over).
    const other = merge(base, snapshot(10.5, 10, 3));
    const again = applyChange(other, { kind: 'observation', observation: obs, prepared }, 0);
    expect(again).not.toBe(next);
    expect(plainLedger(again)).toEqual(plainLedger(merge(other, obs)));
  });
});
