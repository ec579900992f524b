import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { legacyUserToModern } from '../src/presence/convert.js';
import { answer, createLedger, merge, type LedgerState, type ModernPresence } from '../src/presence/ledger.js';

/**
 * P14 and P15 as properties of the pure ledger, against an upstream that keeps one row per
 * client as servers before 7.0 do. Several clients of one user report `active` and `idle` in
 * every order; the shim records each accepted `active` report as the caller's own (P15) and
 * takes in legacy snapshots now and then, late ones too. The oracle is what a modern server
 * shows for the same reports: the last active time, and the last time any client reported.
 */

type Step =
  | { t: 'report'; client: number; status: 'active' | 'idle'; after: number }
  | { t: 'snapshot' }
  | { t: 'late'; back: number }
  | { t: 'poll' };

const CLIENTS = ['website', 'ZulipMobile', 'ZulipElectron'];
const USER = 7;
const JOINED = 500;

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      t: fc.constant('report' as const),
      client: fc.nat(CLIENTS.length - 1),
      status: fc.constantFrom('active' as const, 'idle' as const),
      after: fc.integer({ min: 0, max: 90 }),
    }),
  },
  { weight: 2, arbitrary: fc.constant({ t: 'snapshot' as const }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('late' as const), back: fc.integer({ min: 1, max: 3 }) }) },
  { weight: 3, arbitrary: fc.constant({ t: 'poll' as const }) },
);

interface Row {
  client: string;
  status: 'active' | 'idle';
  timestamp: number;
}

/**
 * `invisibleMode`: the server has it (3.0–6.x), so a step that shows the user hidden is taken as
 * it is (I8); none of these ordinary reports, seen by the realm's polls, may look like one.
 */
function run(steps: Step[], invisibleMode = false): { ledger: LedgerState; movedBack: number; now: number } {
  let now = 1_000; // the upstream's clock, seconds
  const rows = new Map<string, Row>();
  const snapshots: Array<{ ts: number; entry: ModernPresence | undefined }> = [];
  // The oracle: a modern server's last_active_time and last_connected_time.
  let lastActive = JOINED;
  let lastConnected = 0;
  let ledger = createLedger(1_000_000);
  let servedActive = 0;
  let movedBack = 0;
  let clientMap = new Map<number, ModernPresence>();
  let clientId: number | undefined;

  const legacyEntry = () => {
    if (rows.size === 0) return undefined;
    const entry: Record<string, unknown> = {};
    let newest: Row | undefined;
    for (const r of rows.values()) {
      entry[r.client] = { ...r, pushable: false };
      if (!newest || r.timestamp >= newest.timestamp) newest = r;
    }
    entry.aggregated = { client: newest!.client, status: newest!.status, timestamp: newest!.timestamp };
    return legacyUserToModern(entry, JOINED);
  };

  for (const st of steps) {
    switch (st.t) {
      case 'report': {
        now = Math.floor(now) + 1 + st.after; // rows hold whole seconds
        // 2.1: the client's own row is replaced, whatever its other clients said.
        rows.set(CLIENTS[st.client]!, { client: CLIENTS[st.client]!, status: st.status, timestamp: now });
        lastConnected = now;
        if (st.status === 'active') {
          lastActive = now;
          // P15: the accepted report enters the ledger as the upstream's observation, at its time.
          const own = new Map([[USER, { active_timestamp: now, idle_timestamp: now }]]);
          ledger = merge(ledger, { serverTimestamp: now + 0.999, presences: own, complete: false, report: true });
          const got = ledger.users.get(USER)!;
          expect(got.active).toBe(now); // the caller sees its own report at once
        }
        break;
      }
      case 'snapshot': {
        now = Math.floor(now) + 0.5;
        const s = { ts: now, entry: legacyEntry() };
        snapshots.push(s);
        ledger = merge(ledger, {
          serverTimestamp: s.ts,
          presences: new Map(s.entry ? [[USER, s.entry]] : []),
          complete: true,
          invisibleMode,
        });
        break;
      }
      case 'late': {
        const s = snapshots[snapshots.length - 1 - st.back];
        // A late answer is late by at most the upstream deadline (X3); older is a clock step (X14).
        if (s && s.ts >= now - 120)
          ledger = merge(ledger, {
            serverTimestamp: s.ts,
            presences: new Map(s.entry ? [[USER, s.entry]] : []),
            complete: true,
            invisibleMode,
          });
        break;
      }
      case 'poll': {
        const a = answer(ledger, { lastUpdateId: clientId, serverTimestamp: now });
        const got = new Map(Object.entries(a.presences).map(([k, v]) => [Number(k), v]));
        if (a.full) clientMap = got;
        else for (const [k, v] of got) clientMap.set(k, v);
        clientId = a.presenceLastUpdateId;
        const held = clientMap.get(USER);
        if (held) {
          // P14: what the client holds never moves back, and is never ahead of the modern server.
          movedBack = Math.max(movedBack, servedActive - held.active_timestamp);
          servedActive = Math.max(servedActive, held.active_timestamp);
          expect(held.active_timestamp).toBeLessThanOrEqual(lastActive);
          expect(held.idle_timestamp).toBeLessThanOrEqual(Math.max(lastConnected, lastActive));
          expect(held.idle_timestamp).toBeGreaterThanOrEqual(held.active_timestamp); // P2
        }
        break;
      }
    }
  }
  // Once a snapshot after the last report is in, the client holds what a modern server shows.
  if (rows.size > 0) {
    now = Math.floor(now) + 1.5;
    ledger = merge(ledger, { serverTimestamp: now, presences: new Map([[USER, legacyEntry()!]]), complete: true, invisibleMode });
    const a = answer(ledger, { lastUpdateId: clientId, serverTimestamp: now });
    if (a.full) clientMap = new Map();
    for (const [k, v] of Object.entries(a.presences)) clientMap.set(Number(k), v);
    const expectedActive = Math.max(lastActive, ledger === undefined ? 0 : JOINED);
    expect(clientMap.get(USER)).toEqual({ active_timestamp: expectedActive, idle_timestamp: Math.max(lastConnected, expectedActive) });
  }
  return { ledger, movedBack, now };
}

describe('P14, P15: several clients of one user on a server with a row per client', () => {
  it('active time never moves back, and every accepted active report is seen at once', () => {
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 60 }), fc.boolean(), (steps, invisibleMode) => {
        expect(run(steps, invisibleMode).movedBack).toBe(0);
      }),
      { numRuns: 3000 },
    );
  });

  it('invisible mode: the one backdated idle row is taken as it is, whatever the age of the last report (I8, 3.0–6.x)', () => {
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 40 }), fc.integer({ min: 0, max: 7_200 }), (steps, age) => {
        const { ledger, now } = run(steps, true);
        // The user turns invisible `age` seconds after the last snapshot: their rows become one idle row 420 s back.
        const at = Math.floor(now) + 1 + age;
        const hidden = legacyUserToModern({ website: { client: 'website', status: 'idle', timestamp: at - 420 } }, JOINED)!;
        const after = merge(ledger, {
          serverTimestamp: at + 0.5,
          presences: new Map([[USER, hidden]]),
          complete: true,
          invisibleMode: true,
        });
        expect(after.users.get(USER)).toMatchObject({ active: hidden.active_timestamp, idle: hidden.idle_timestamp });
      }),
      { numRuns: 1000 },
    );
  });

  it('on 2.1 (no invisible mode) an idle report first seen long after it was made keeps the active time (P14)', () => {
    const p = (a: number, i: number) => new Map([[USER, { active_timestamp: a, idle_timestamp: i }]]);
    let l = createLedger(1_000_000);
    l = merge(l, { serverTimestamp: 1_000.5, presences: p(1_000, 1_000), complete: true });
    // The only client reported idle at 1,010; nobody polled the realm for an hour.
    l = merge(l, { serverTimestamp: 4_610.5, presences: p(JOINED, 1_010), complete: true });
    expect(l.users.get(USER)).toMatchObject({ active: 1_000, idle: 1_010 });
  });

  it('an idle report after an active one from another client keeps the active time (the 2.1 case)', () => {
    let l = createLedger(1_000_000);
    const legacy = (rows: Row[]) => {
      const e: Record<string, unknown> = {};
      for (const r of rows) e[r.client] = r;
      return legacyUserToModern(e, JOINED)!;
    };
    const snap = (ts: number, rows: Row[]) => merge(l, { serverTimestamp: ts, presences: new Map([[USER, legacy(rows)]]), complete: true });
    l = snap(1_000, [{ client: 'website', status: 'active', timestamp: 990 }]);
    // The same client goes idle: its row is replaced, and 2.1 shows no active time at all.
    l = snap(1_200, [{ client: 'website', status: 'idle', timestamp: 1_180 }]);
    expect(l.users.get(USER)).toMatchObject({ active: 990, idle: 1_180 });
  });

  it('invisible mode still backdates the whole user (6.0–8.x: one idle row well in the past)', () => {
    let l = createLedger(1_000_000);
    const p = (a: number, i: number) => new Map([[USER, { active_timestamp: a, idle_timestamp: i }]]);
    l = merge(l, { serverTimestamp: 1_000, presences: p(990, 995), complete: true });
    l = merge(l, { serverTimestamp: 1_010, presences: p(JOINED, 1_010 - 420), complete: true });
    expect(l.users.get(USER)).toMatchObject({ active: JOINED, idle: 590 });
  });

  it.each([
    ['3.0–6.x', 420],
    ['7.0–8.x', 320],
  ])('invisible mode on %s, the last report older than the backdated row: taken as it is (I8)', (_era, back) => {
    let l = createLedger(1_000_000);
    const p = (a: number, i: number) => new Map([[USER, { active_timestamp: a, idle_timestamp: i }]]);
    l = merge(l, { serverTimestamp: 1_000, presences: p(990, 995), complete: true, invisibleMode: true });
    // Ten minutes later the user turns invisible: the backdated row is newer than their last report.
    l = merge(l, { serverTimestamp: 1_600.25, presences: p(JOINED, 1_600 - back), complete: true, invisibleMode: true });
    expect(l.users.get(USER)).toMatchObject({ active: JOINED, idle: 1_600 - back });
  });
});
