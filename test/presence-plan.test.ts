import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  Leader,
  LEADER_WAIT_CAP_MS,
  leaderWait,
  planAnswer,
  planDuringRefresh,
  planLeader,
  planLedger,
  planReplicaSource,
  planStart,
  pollPolicy,
  type LedgerView,
  type PolicyInput,
} from '../src/presence/plan.js';

/**
 * The presence poll's decisions (plan.ts), as tables: P9 sharing and single flight, S1 across
 * replicas, B7 answering during a refresh, X1 which ledger and whether the counter is raised.
 */

const input = (o: Partial<PolicyInput> = {}): PolicyInput => ({
  everyCallerSeesTheSameUsers: true,
  coalesceMs: 5_000,
  leaderWaitMs: 200,
  replicas: false,
  realmKey: 'http://up|realm:https://chat.example.com',
  format: 'slim',
  caller: () => 'caller-1',
  ...o,
});

describe('pollPolicy: the sharing rule, once per poll (P9, S1)', () => {
  it.each([
    // shared, coalesceMs, replicas → scope suffix, windowed, acrossReplicas
    [true, 5_000, false, '', true, false],
    [true, 5_000, true, '', true, true],
    [true, 0, true, '', false, false],
    [false, 5_000, true, '|caller-1', true, false],
    [false, 0, false, '|caller-1', false, false],
  ])(
    'shared %s, coalesceMs %d, replicas %s → scope …%s, windowed %s, across replicas %s',
    (shared, coalesceMs, replicas, suffix, windowed, across) => {
      const p = pollPolicy(input({ everyCallerSeesTheSameUsers: shared, coalesceMs, replicas }));
      expect(p.scope).toBe(`http://up|realm:https://chat.example.com|slim${suffix}`);
      expect(p.windowed).toBe(windowed);
      expect(p.acrossReplicas).toBe(across);
      expect(p.shared).toBe(shared);
    },
  );

  it('asks for the caller only where the scope is the caller’s (P13: no key made for nothing)', () => {
    let asked = 0;
    pollPolicy(input({ caller: () => `c${++asked}` }));
    expect(asked).toBe(0);
    pollPolicy(input({ everyCallerSeesTheSameUsers: false, caller: () => `c${++asked}` }));
    expect(asked).toBe(1);
  });
});

describe('planStart: a full poll answers from its window, joins a refresh, or leads one (P9)', () => {
  it.each([
    [true, false, 'fromFresh'],
    [true, true, 'fromFresh'],
    [false, true, 'join'],
    [false, false, 'lead'],
  ] as const)('fresh %s, pending %s → %s', (fresh, pending, step) => {
    expect(planStart({ fresh, pending })).toBe(step);
  });
});

describe('planReplicaSource: one fetch per scope between replicas (S1)', () => {
  it.each([
    [true, false, 'readPublished'],
    [false, true, 'fetchAndPublish'],
    [false, false, 'followFetch'],
  ] as const)('published %s, lock taken here %s → %s', (published, locked, source) => {
    expect(planReplicaSource({ published, locked })).toBe(source);
  });
});

describe('planLeader: how long a refresh holds its leader (B7)', () => {
  it.each([
    // shared, coalesceMs, follows another replica's fetch → plan
    [true, 5_000, false, { wait: 'then-ledger', waitMs: 200 }],
    [true, 5_000, true, { wait: 'then-ledger', waitMs: undefined }],
    [true, 0, false, { wait: 'wholeRefresh' }],
    [false, 5_000, false, { wait: 'wholeRefresh' }],
    [false, 0, true, { wait: 'wholeRefresh' }],
  ] as const)('shared %s, coalesceMs %d, following %s → %j', (shared, coalesceMs, follows, plan) => {
    expect(planLeader(pollPolicy(input({ everyCallerSeesTheSameUsers: shared, coalesceMs })), follows)).toEqual(plan);
  });
});

const ledger = (lastId: number, completeAt: number, vouches: boolean): LedgerView => ({ lastId, completeAt, vouches });

describe('planDuringRefresh: a delta poll the ledger vouches for is not held by a refresh (B7, X1, S1, S3)', () => {
  it.each([
    // id, modern, held ledger, store read already → step
    [undefined, true, ledger(10, 1, true), false, 'wait'], // full poll: only the refresh is "now" (P7)
    [-1, true, ledger(10, 1, true), false, 'wait'],
    [0, true, ledger(10, 1, true), false, 'wait'],
    [5, false, ledger(10, 1, true), false, 'wait'], // legacy format: full data only
    [5, true, undefined, false, 'wait'],
    [5, true, ledger(10, 0, true), false, 'wait'], // no complete snapshot yet (I5)
    [5, true, ledger(10, 1, false), false, 'wait'], // id not vouched for (I2)
    [5, true, ledger(10, 1, true), false, 'answer'],
    [12, true, ledger(10, 1, false), false, 'readStore'], // another replica issued it since (S1)
    [12, true, ledger(20, 1, true), true, 'answer'],
    [12, true, ledger(10, 1, false), true, 'wait'], // read, still above: nothing to vouch with
    // S3: this process took in an answer the ledger lacks (the store was away): no copy answers.
    [5, true, { ...ledger(10, 1, true), behind: true }, false, 'wait'],
    [12, true, { ...ledger(10, 1, false), behind: true }, false, 'wait'], // not even after a read
    [12, true, { ...ledger(20, 1, true), behind: true }, true, 'wait'],
  ] as const)('id %s, modern %s, ledger %j, store read %s → %s', (id, modern, held, read, step) => {
    expect(planDuringRefresh({ lastUpdateId: id, modern }, held, read)).toBe(step);
  });
});

describe('planLedger and planAnswer: which ledger, delta or full, counter raised (X1, I6, P3)', () => {
  it.each([
    [undefined, 'readStore'],
    [ledger(10, 1, false), 'readStore'],
    [ledger(10, 1, true), 'held'],
  ] as const)('held %j → %s', (held, choice) => {
    expect(planLedger(held)).toBe(choice);
  });

  it.each([
    // ledger, client id → kind, delta, raise to
    [ledger(10, 1, true), 5, 'delta', true, undefined],
    [ledger(10, 1, false), undefined, 'modern_full', false, undefined],
    [ledger(10, 1, false), -1, 'modern_full', false, undefined],
    [ledger(10, 1, false), 0, 'modern_full', false, undefined],
    [ledger(10, 1, false), 3, 'resync', false, undefined], // below the counter, not vouched (I2)
    [ledger(10, 1, false), 10, 'resync', false, undefined],
    [ledger(10, 1, false), 11, 'resync', false, 11], // above the counter: raised first (I6)
  ] as const)('ledger %j, id %s → %s (delta %s, raise to %s)', (l, id, kind, delta, raiseTo) => {
    expect(planAnswer(l, id)).toEqual({ kind, delta, raiseTo });
  });

  it('never raises the counter for a delta, and never answers a delta the ledger does not vouch for (X1)', () => {
    fc.assert(
      fc.property(fc.nat(1e6), fc.boolean(), fc.option(fc.integer({ min: -5, max: 2e6 }), { nil: undefined }), (lastId, vouches, id) => {
        const p = planAnswer(ledger(lastId, 1, vouches), id);
        expect(p.delta).toBe(vouches);
        if (p.delta) expect(p.raiseTo).toBeUndefined();
        if (p.raiseTo !== undefined) expect(p.raiseTo).toBeGreaterThan(lastId);
      }),
    );
  });
});

describe('leaderWait: a large realm’s refresh still reaches the poll that started it (B7)', () => {
  it.each([
    // configured, the scope's last refresh (ms) → wait
    [200, undefined, 200], // no refresh seen yet: the configured wait
    [200, 50, 200], // a small realm: never below the configured wait
    [200, 2_000, 2_500], // 100k users: as long as the last refresh took, with a margin
    [200, 2_400, 3_000], // capped
    [200, 60_000, 3_000], // an upstream in trouble holds no poll longer than the cap
    [60_000, 2_000, 60_000], // an operator's longer wait stands
  ] as const)('configured %d ms, last refresh %s ms → waits %d ms', (configured, last, wait) => {
    expect(leaderWait(configured, last)).toBe(wait);
    const p = pollPolicy(input({ leaderWaitMs: configured, lastFetchMs: (scope) => (scope.endsWith('|slim') ? last : undefined) }));
    expect(p.leaderWaitMs).toBe(wait);
    expect(planLeader(p, false)).toEqual({ wait: 'then-ledger', waitMs: wait });
  });

  it('never waits past the cap, nor less than configured, for any refresh time', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 10_000 }),
        fc.option(fc.double({ min: 0, max: 1e6, noNaN: true }), { nil: undefined }),
        (configured, last) => {
          const w = leaderWait(configured, last);
          expect(w).toBeGreaterThanOrEqual(configured);
          if (configured < LEADER_WAIT_CAP_MS) expect(w).toBeLessThanOrEqual(LEADER_WAIT_CAP_MS);
        },
      ),
    );
  });
});

describe('Leader: a refresh leader is answered early or reports again, never both (B7, P9)', () => {
  const cases: Array<{ steps: Array<'answer' | 'reportAgain'>; results: boolean[] }> = [
    { steps: ['answer'], results: [true] },
    { steps: ['reportAgain'], results: [true] },
    { steps: ['answer', 'reportAgain'], results: [true, false] },
    { steps: ['reportAgain', 'answer'], results: [true, false] },
    { steps: ['answer', 'answer'], results: [true, true] },
    { steps: ['reportAgain', 'reportAgain'], results: [true, true] },
    { steps: ['answer', 'reportAgain', 'answer'], results: [true, false, true] },
  ];
  it.each(cases)('$steps → $results', ({ steps, results }) => {
    const leader = new Leader();
    expect(steps.map((step) => leader[step]())).toEqual(results);
  });
});
