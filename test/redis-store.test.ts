import net from 'node:net';
import { Writable } from 'node:stream';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createLogger } from '../src/observability/logger.js';
import { answer, merge, prepareMerge, vouchesFor, type LedgerState, type Observation } from '../src/presence/ledger.js';
import { encodeLedger } from '../src/store/codec.js';
import { ADMITTED_TTL_MS, LEDGER_IDLE_TTL_MS, RedisStore, type RedisStoreOptions } from '../src/store/redis.js';
import { StoreUnavailableError } from '../src/store/types.js';
import { plainLedger, realisticLedger } from './support/ledgers.js';
import { adminRedis, deleteKeysUnder, describeRedis, keysUnder, REDIS_URL, suiteKeyPrefix, testKeyPrefix } from './support/redis.js';
import { redisKey } from '../src/store/redis-keys.js';
import { REDIS_STORE_BUDGETS } from './support/budgets.js';
import { RedisRelay } from './support/redis-relay.js';

const obs = (serverTimestamp: number, users: Record<number, [number, number]>, complete = true): Observation => ({
  serverTimestamp,
  complete,
  presences: new Map(Object.entries(users).map(([id, [a, i]]) => [Number(id), { active_timestamp: a, idle_timestamp: i }])),
});

function logSink() {
  const lines: Array<{ level: number; msg: string }> = [];
  const log = createLogger(
    'info',
    new Writable({
      write(chunk, _enc, cb) {
        lines.push(JSON.parse(String(chunk)) as { level: number; msg: string });
        cb();
      },
    }),
  );
  return { log, lines };
}

function counter() {
  return {
    n: 0,
    inc() {
      this.n++;
    },
  };
}

describeRedis('RedisStore (S1, P5)', () => {
  const prefix = testKeyPrefix();
  let admin: Redis;
  const stores: RedisStore[] = [];
  const open = (o: Partial<RedisStoreOptions> = {}) => {
    const s = new RedisStore({ ...REDIS_STORE_BUDGETS, url: REDIS_URL, keyPrefix: prefix, log: logSink().log, ...o });
    stores.push(s);
    return s;
  };

  beforeAll(() => {
    admin = adminRedis();
  });
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()));
    await deleteKeysUnder(admin, prefix);
    admin.disconnect();
  });

  it('raises a realm counter by the shared clock, seen by every replica (X1)', async () => {
    const a = open();
    const b = open();
    const created = await a.raiseCounter('r-raise', 0); // only creates the ledger
    expect(created.lastId).toBe(created.epoch);
    const s = await a.merge('r-raise', obs(10, { 1: [9, 10] }));
    // Redis's clock (TIME) decides what is plausible: an id 1,000 s ahead of it is not yet.
    const ahead = s.lastId + 1_000_000_000;
    expect((await a.raiseCounter('r-raise', ahead)).lastId).toBe(s.lastId);
    const plausible = s.lastId + 1;
    const raised = await b.raiseCounter('r-raise', plausible);
    // Past the raised id: its mark just above it, the id raised past vouched for by nobody, the
    // ids issued before as they were (I6).
    expect(raised.lastId).toBe(plausible + 1);
    expect(vouchesFor(raised, plausible)).toBe(false);
    expect(vouchesFor(raised, s.lastId)).toBe(true);
    expect(raised.raised).toHaveLength(1);
    expect(plainLedger(b.peek('r-raise'))).toEqual(plainLedger(raised));
    expect((await a.load('r-raise'))!.lastId).toBe(plausible + 1);
    expect(a.peek('r-raise')!.lastId).toBe(plausible + 1);
  });

  it('keeps its decoded copies within memory.ledgersBytes (X2), reading a realm again when it had to let it go', async () => {
    const many = (n: number) =>
      Object.fromEntries(Array.from({ length: n }, (_, i) => [i + 1, [100, 100 + i]])) as Record<number, [number, number]>;
    // Room for one realm of 1,000 users (89 kB charged: 88 B a user, B5), not two.
    const store = open({ maxBytes: 150_000 });
    const a = await store.merge('r-bytes-a', obs(10, many(1_000)));
    expect(store.peek('r-bytes-a')).toBeDefined();
    await store.merge('r-bytes-b', obs(10, many(1_000)));
    expect(store.peek('r-bytes-b')).toBeDefined();
    expect(store.peek('r-bytes-a')).toBeUndefined();
    expect(plainLedger(await store.load('r-bytes-a'))).toEqual(plainLedger(a));
  });

  it('remembers the realms taken on for every replica and a restart (X12), each for ADMITTED_TTL_MS after it was last asked about', async () => {
    const a = open();
    expect(await a.isAdmitted('r-admitted')).toBe(false);
    await a.admit('r-admitted');
    const b = open(); // another replica, or this one restarted
    expect(await b.isAdmitted('r-admitted')).toBe(true);
    expect(await b.isAdmitted('r-other')).toBe(false);
    const key = a.admittedKey('r-admitted');
    expect(key).toBe(`${prefix}{r-admitted}:admitted`);
    await admin.pexpire(key, 1_000);
    expect(await b.isAdmitted('r-admitted')).toBe(true);
    expect(await admin.pttl(key)).toBeGreaterThan(ADMITTED_TTL_MS - 60_000);
  });

  it('has no ledger for a new realm, creates one on the first observation, and loads what it wrote', async () => {
    const store = open();
    expect(await store.load('r-new')).toBeUndefined();
    const before = Date.now() * 1000;
    const s = await store.merge('r-new', obs(100.5, { 1: [90, 95], 2: [80, 80] }));
    expect(s.epoch).toBeGreaterThanOrEqual(before);
    expect([...s.users.values()].map((e) => e.changedAt)).toEqual([s.epoch + 1, s.epoch + 2]);
    expect(plainLedger(await store.load('r-new'))).toEqual(plainLedger(s));
    expect(plainLedger(await open().load('r-new'))).toEqual(plainLedger(s)); // another replica reads the same state
  });

  it('keeps one key per realm under the prefix, expiring after the idle TTL, refreshed by writes', async () => {
    const store = open();
    await store.merge('r-ttl', obs(1, { 1: [1, 1] }));
    expect(await keysUnder(admin, redisKey(prefix, 'presence', 'r-ttl'))).toEqual([redisKey(prefix, 'presence', 'r-ttl')]);
    await admin.pexpire(redisKey(prefix, 'presence', 'r-ttl'), 1_000);
    await store.merge('r-ttl', obs(2, { 1: [2, 2] }));
    const ttl = await admin.pttl(redisKey(prefix, 'presence', 'r-ttl'));
    expect(ttl).toBeGreaterThan(1_000);
    expect(ttl).toBeLessThanOrEqual(LEDGER_IDLE_TTL_MS);
  });

  it('starts a new epoch above every earlier id when the key is gone (flush, eviction, new Redis): old ids get full data', async () => {
    const a = open();
    const b = open();
    const first = await a.merge('r-flush', obs(10, { 1: [10, 10], 2: [9, 10] }));
    const second = await b.merge('r-flush', obs(20, { 1: [20, 20] }));
    const issued = [first.lastId, second.lastId];
    await deleteKeysUnder(admin, prefix);
    expect(await a.load('r-flush')).toBeUndefined();
    const after = await a.merge('r-flush', obs(30, { 2: [30, 30] }));
    expect(after.epoch).toBeGreaterThanOrEqual(Math.max(...issued));
    for (const id of issued) {
      expect(vouchesFor(after, id)).toBe(false);
      const full = answer(after, { visible: [2], lastUpdateId: id, serverTimestamp: 30 });
      expect(full.full).toBe(true);
      expect(Object.keys(full.presences)).toEqual(['2']);
    }
    // The replica that saw nothing of the old epoch reads the new one, not a stale copy.
    expect(plainLedger(await b.load('r-flush'))).toEqual(plainLedger(after));
  });

  it('replaces a value it cannot read with a new ledger instead of failing', async () => {
    const store = open();
    await admin.set(redisKey(prefix, 'presence', 'r-junk'), 'not a ledger at all');
    expect(await store.load('r-junk')).toBeUndefined();
    const s = await store.merge('r-junk', obs(5, { 7: [5, 5] }));
    expect(s.users.get(7)?.present).toBe(true);
    expect(plainLedger(await open().load('r-junk'))).toEqual(plainLedger(s));
  });

  it('answers the same observation twice without a second write, and sees another replica write in between', async () => {
    const a = open();
    const b = open();
    const o1 = obs(50, { 1: [50, 50] });
    const s1 = await a.merge('r-same', o1);
    expect(await a.merge('r-same', o1)).toBe(s1);
    const s2 = await b.merge('r-same', obs(60, { 1: [60, 60] }));
    expect(plainLedger(await a.merge('r-same', o1))).toEqual(plainLedger(s2)); // o1 is older: nothing changes, but a sees b's state
  });

  it('batches concurrent observations of one realm into one history: every caller gets its own step', async () => {
    const store = open();
    const many = Array.from({ length: 25 }, (_, i) => obs(100 + i, { [i % 5]: [100 + i, 100 + i] }));
    const states = await Promise.all(many.map((o) => store.merge('r-batch', o)));
    const ids = states.map((s) => s.lastId);
    for (let i = 1; i < ids.length; i++) expect(ids[i]).toBeGreaterThan(ids[i - 1]!);
    expect(plainLedger(await store.load('r-batch'))).toEqual(plainLedger(states.at(-1)));
  });

  it("reads another replica's writes as their changes, applied to its copy (the whole value is not read)", async () => {
    const a = open();
    const b = open();
    await a.merge('r-changes', obs(10, { 1: [10, 10], 2: [9, 10], 3: [5, 8] }));
    await b.load('r-changes'); // b's copy: a cold start reads the whole value
    await a.merge('r-changes', obs(20, { 1: [20, 20], 2: [9, 10], 3: [5, 8] }));
    const written = await a.merge('r-changes', obs(30, { 1: [20, 20], 2: [30, 30] }));
    // The ledger part of the value spoiled (its head kept): only the changes can give b the state.
    const key = redisKey(prefix, 'presence', 'r-changes');
    await admin.setrange(key, 48, 'not a ledger');
    const read = await b.load('r-changes');
    expect(plainLedger(read)).toEqual(plainLedger(written));
    expect(answer(read!, { lastUpdateId: written.epoch + 3, serverTimestamp: 30 })).toEqual(
      answer(written, { lastUpdateId: written.epoch + 3, serverTimestamp: 30 }),
    );
  });

  it("rebases a merge prepared on its copy over another replica's report written meanwhile (B7, I7)", async () => {
    const a = open();
    const b = open();
    await a.merge('r-rebase', obs(1_010, { 1: [901, 901], 2: [902, 902], 3: [903, 903], 4: [904, 904] }));
    await b.load('r-rebase');
    // a's refresh, prepared on its copy; meanwhile b writes a caller's own report (P15).
    const refresh = obs(1_020, { 1: [1_012, 1_018], 2: [1_019, 1_019], 4: [904, 904] });
    const prepared = await prepareMerge(a.peek('r-rebase')!, refresh, async () => {});
    const between = await b.merge('r-rebase', { ...obs(1_015.999, { 1: [1_015, 1_015] }, false), report: true });
    const stored = await a.merge('r-rebase', refresh, prepared);
    const full = merge(between, refresh);
    // The rebase's ids: the refresh's own user first, then the user of both (a merge made again
    // gives the observation's order); everything else as the full merge, and in Redis.
    expect(stored.users.get(2)!.changedAt).toBe(between.lastId + 1);
    expect(stored.users.get(1)!.changedAt).toBe(between.lastId + 2);
    expect(full.users.get(1)!.changedAt).toBe(between.lastId + 1);
    expect(stored.users.get(1)).toMatchObject({ active: 1_015, idle: 1_018 });
    const ids = (s: LedgerState) => ({ ...s, users: [...s.users].map(([u, e]) => [u, { ...e, changedAt: e.changedAt > between.lastId }]) });
    expect(ids(stored)).toEqual(ids(full));
    expect(plainLedger(await b.load('r-rebase'))).toEqual(plainLedger(stored));
  });

  it.each([
    [
      'more writes than the changes kept',
      async (a: RedisStore) => {
        // The first write's change (user 7) is in none of the changes kept when b reads.
        await a.merge('r-missed', obs(100, { 7: [100, 100] }, false));
        for (let i = 1; i < 12; i++) await a.merge('r-missed', obs(100 + i, { 1: [100 + i, 100 + i] }, false));
      },
    ],
    [
      'the changes gone (evicted)',
      async (a: RedisStore) => {
        await a.merge('r-missed', obs(200, { 9: [200, 200] }));
        await admin.del(redisKey(prefix, 'presence-changes', 'r-missed'));
      },
    ],
    [
      'a new epoch in between (flush)',
      async (a: RedisStore) => {
        await admin.del(redisKey(prefix, 'presence', 'r-missed'));
        await a.merge('r-missed', obs(300, { 9: [300, 300] }));
        await a.merge('r-missed', obs(301, { 9: [301, 301] }));
      },
    ],
  ])('falls back to reading the whole value after a missed version: %s', async (_name, writes) => {
    await deleteKeysUnder(admin, prefix);
    const a = open();
    const b = open();
    await a.merge('r-missed', obs(10, { 1: [10, 10], 2: [9, 10] }));
    await b.load('r-missed');
    await writes(a);
    const written = a.peek('r-missed')!;
    expect(plainLedger(await b.load('r-missed'))).toEqual(plainLedger(written));
    // And b, writing next, continues that one history.
    const next = await b.merge('r-missed', obs(1_000, { 5: [1_000, 1_000] }));
    expect(next.users.get(5)!.changedAt).toBe(written.lastId + 1);
    expect(plainLedger(await a.load('r-missed'))).toEqual(plainLedger(next));
  });

  it('measures Redis memory for a 10,000-user realm (MEMORY USAGE)', async () => {
    const key = redisKey(prefix, 'presence', 'r-size');
    const value = Buffer.concat([Buffer.alloc(48), encodeLedger(realisticLedger(10_000))]);
    await admin.set(key, value);
    const bytes = Number(await admin.call('MEMORY', 'USAGE', key));
    console.info(`Redis MEMORY USAGE for a 10,000-user realm: ${bytes} bytes (${(bytes / 10_000).toFixed(1)} per user)`);
    expect(bytes).toBeLessThan(200_000);
  });
});

describeRedis('RedisStore when Redis goes away and comes back (S1)', () => {
  const prefix = suiteKeyPrefix();

  it('fails fast with StoreUnavailableError, counts every failure, logs once, and recovers by itself', async () => {
    const relay = new RedisRelay();
    await relay.start();
    const { log, lines } = logSink();
    const errors = counter();
    const store = new RedisStore({
      ...REDIS_STORE_BUDGETS,
      url: `redis://127.0.0.1:${relay.port}`,
      keyPrefix: prefix,
      log,
      storeErrors: errors,
    });
    try {
      await expect
        .poll(
          () =>
            store.ping().then(
              () => true,
              () => false,
            ),
          // A ping can take the store's whole command timeout (1 s), poll's own default.
          { timeout: 10_000 },
        )
        .toBe(true);
      await store.merge('r-down', obs(1, { 1: [1, 1] }));

      await relay.stop();
      await expect
        .poll(
          () =>
            store.ping().then(
              () => 'up',
              (e: unknown) => e instanceof StoreUnavailableError,
            ),
          { timeout: 10_000 },
        )
        .toBe(true);
      const failures = await Promise.allSettled([
        ...Array.from({ length: 10 }, (_, i) => store.merge('r-down', obs(2 + i, { 1: [2 + i, 2 + i] }))),
        store.load('r-down'),
      ]);
      for (const f of failures) {
        expect(f.status).toBe('rejected');
        expect((f as PromiseRejectedResult).reason).toBeInstanceOf(StoreUnavailableError);
      }
      expect(errors.n).toBeGreaterThanOrEqual(11);
      const down = lines.filter((l) => /unavailable/.test(l.msg));
      expect(down).toHaveLength(1);
      expect(JSON.stringify(lines)).not.toContain(`redis://`);

      await relay.start(relay.port);
      await expect
        .poll(
          () =>
            store.ping().then(
              () => true,
              () => false,
            ),
          { timeout: 10_000 },
        )
        .toBe(true);
      const s = await store.merge('r-down', obs(50, { 1: [50, 50] }));
      expect(s.users.get(1)?.active).toBe(50);
      expect(lines.filter((l) => /reachable again/.test(l.msg))).toHaveLength(1);
    } finally {
      await store.close();
      await relay.stop().catch(() => {});
    }
  });
});

it('fails fast with StoreUnavailableError when nothing listens at the Redis URL', async () => {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((r) => server.close(() => r()));
  const errors = counter();
  const store = new RedisStore({
    ...REDIS_STORE_BUDGETS,
    url: `redis://127.0.0.1:${port}`,
    keyPrefix: 'x:',
    log: logSink().log,
    storeErrors: errors,
  });
  try {
    await expect(store.merge('r', obs(1, { 1: [1, 1] }))).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(store.load('r')).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(store.ping()).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(errors.n).toBe(3);
  } finally {
    await store.close();
  }
});
