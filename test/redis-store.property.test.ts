import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createLogger } from '../src/observability/logger.js';
import { answer, merge, vouchesFor, type LedgerState, type ModernPresence, type Observation } from '../src/presence/ledger.js';
import { RedisStore } from '../src/store/redis.js';
import { plainLedger } from './support/ledgers.js';
import { adminRedis, deleteKeysUnder, describeRedis, REDIS_URL, testKeyPrefix } from './support/redis.js';
import { REDIS_STORE_BUDGETS } from './support/budgets.js';

/**
 * Observations applied through Redis, from one replica or two at once, give exactly what the
 * pure ledger gives applied one after another (S1), and ids stay strictly increasing for a
 * realm, also across a wiped Redis (P5).
 */

const presence: fc.Arbitrary<ModernPresence> = fc
  .tuple(fc.integer({ min: 0, max: 1_000 }), fc.nat(300))
  .map(([a, d]) => ({ active_timestamp: a, idle_timestamp: a + d }));

const observation: fc.Arbitrary<Observation> = fc.record({
  serverTimestamp: fc.oneof(fc.integer({ min: 1, max: 40 }), fc.double({ min: 1, max: 40, noNaN: true })),
  presences: fc.array(fc.tuple(fc.integer({ min: 1, max: 8 }), presence), { maxLength: 6 }).map((pairs) => new Map(pairs)),
  complete: fc.boolean(),
});

const emptyLedger = (epoch: number): LedgerState => ({ epoch, lastId: epoch, users: new Map(), raised: [], merges: [], completeAt: 0 });

/**
 * A serial order of the observations in which the pure merge, step by step, gives exactly the
 * state each observe() returned; the last state of that order, or undefined when none exists.
 */
function serialOrder(start: LedgerState, results: Array<{ obs: Observation; state: LedgerState }>): LedgerState[] | undefined {
  if (results.length === 0) return [];
  for (let i = 0; i < results.length; i++) {
    const r = results[i]!;
    if (!isDeepStrictEqual(plainLedger(merge(start, r.obs)), plainLedger(r.state))) continue;
    const rest = serialOrder(r.state, [...results.slice(0, i), ...results.slice(i + 1)]);
    if (rest) return [r.state, ...rest];
  }
  return undefined;
}

function expectIdsIncreasing(chain: LedgerState[]): void {
  for (let i = 1; i < chain.length; i++) {
    const before = chain[i - 1]!;
    const after = chain[i]!;
    expect(after.lastId).toBeGreaterThanOrEqual(before.lastId);
    for (const [user, e] of after.users) {
      if (before.users.get(user)?.changedAt !== e.changedAt) expect(e.changedAt).toBeGreaterThan(before.lastId);
    }
  }
}

describeRedis('RedisStore against the pure ledger (property, S1, P5)', () => {
  const prefix = testKeyPrefix();
  const log = createLogger('silent');
  let admin: Redis;
  let a: RedisStore;
  let b: RedisStore;
  let run = 0;

  beforeAll(() => {
    admin = adminRedis();
    a = new RedisStore({ ...REDIS_STORE_BUDGETS, url: REDIS_URL, keyPrefix: prefix, log });
    b = new RedisStore({ ...REDIS_STORE_BUDGETS, url: REDIS_URL, keyPrefix: prefix, log });
  });
  afterAll(async () => {
    await Promise.all([a.close(), b.close()]);
    await deleteKeysUnder(admin, prefix);
    admin.disconnect();
  });

  it('one replica, one observation at a time: every state is the pure merge of the one before', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof({ weight: 6, arbitrary: observation }, { weight: 1, arbitrary: fc.constant('flush' as const) }), {
          maxLength: 14,
        }),
        async (steps) => {
          const realm = `seq-${run++}`;
          let expected: LedgerState | undefined;
          let highest = 0;
          for (const step of steps) {
            if (step === 'flush') {
              await deleteKeysUnder(admin, prefix);
              expected = undefined;
              continue;
            }
            const got = await a.merge(realm, step);
            if (!expected) {
              // A new ledger: its epoch is above every id issued before (P5).
              expect(got.epoch).toBeGreaterThanOrEqual(highest);
              expected = emptyLedger(got.epoch);
            }
            expected = merge(expected, step);
            expect(plainLedger(got)).toEqual(plainLedger(expected));
            highest = Math.max(highest, got.lastId);
          }
          if (expected) expect(plainLedger(await b.load(realm))).toEqual(plainLedger(expected));
        },
      ),
      { numRuns: 60 },
    );
  });

  it('two replicas at once, with Redis wiped between rounds: one serial history per round, ids always increasing', async () => {
    const round = fc.array(fc.tuple(fc.boolean(), observation), { minLength: 1, maxLength: 8 });
    await fc.assert(
      fc.asyncProperty(fc.array(round, { minLength: 1, maxLength: 3 }), async (rounds) => {
        const realm = `par-${run++}`;
        const issued: number[] = [];
        for (const r of rounds) {
          const results = await Promise.all(r.map(async ([onA, obs]) => ({ obs, state: await (onA ? a : b).merge(realm, obs) })));
          const epoch = results[0]!.state.epoch;
          expect(results.every((x) => x.state.epoch === epoch)).toBe(true);
          // P5: a ledger made after a wipe vouches for no id issued before it.
          for (const id of issued) expect(vouchesFor(results[0]!.state, id)).toBe(false);
          const chain = serialOrder(emptyLedger(epoch), results);
          expect(chain, 'no serial order of the observations explains the states returned').toBeDefined();
          expectIdsIncreasing([emptyLedger(epoch), ...chain!]);
          expect(plainLedger(await a.load(realm))).toEqual(plainLedger(chain!.at(-1)));
          issued.push(...results.map((x) => x.state.lastId).filter((id) => id > epoch));
          await deleteKeysUnder(admin, prefix);
        }
      }),
      { numRuns: 40 },
    );
  });

  it('after a wipe, a client holding an id from before gets full data, never an empty answer (P5)', async () => {
    const realm = 'wipe-answer';
    const before = await a.merge(realm, {
      serverTimestamp: 10,
      complete: true,
      presences: new Map([[1, { active_timestamp: 5, idle_timestamp: 9 }]]),
    });
    await deleteKeysUnder(admin, prefix);
    const after = await b.merge(realm, {
      serverTimestamp: 11,
      complete: true,
      presences: new Map([[1, { active_timestamp: 5, idle_timestamp: 9 }]]),
    });
    const got = answer(after, { visible: [1], lastUpdateId: before.lastId, serverTimestamp: 11 });
    expect(got.full).toBe(true);
    expect(got.presences).toEqual({ '1': { active_timestamp: 5, idle_timestamp: 9 } });
    expect(got.presenceLastUpdateId).toBeGreaterThan(before.lastId);
  });
});
