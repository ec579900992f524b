import type { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createLogger } from '../src/observability/logger.js';
import { answer, vouchesFor, type Observation } from '../src/presence/ledger.js';
import { RedisStore } from '../src/store/redis.js';
import {
  describeRedisServers,
  redisAt,
  startPersistentRedis,
  startReplicatedPair,
  type PersistentRedis,
  type ReplicatedPair,
} from './support/redis-servers.js';
import { REDIS_STORE_BUDGETS } from './support/budgets.js';

/**
 * What a failover does to the ledger (P5, P6, X1): a replica promoted with a lagging copy holds
 * an older ledger than the one ids were issued from. Ids issued afterwards must be above every
 * id issued before, and ids the new primary cannot vouch for must get full data.
 */

const obs = (serverTimestamp: number, users: Record<number, [number, number]>): Observation => ({
  serverTimestamp,
  complete: true,
  presences: new Map(Object.entries(users).map(([id, [a, i]]) => [Number(id), { active_timestamp: a, idle_timestamp: i }])),
});

describeRedisServers('a Redis failover to a replica that lags (P5, P6, X1)', () => {
  let pair: ReplicatedPair;
  let primary: Redis;
  let replica: Redis;
  const stores: RedisStore[] = [];
  const log = createLogger('silent');
  const storeOn = (port: number) => {
    const s = new RedisStore({ ...REDIS_STORE_BUDGETS, url: `redis://127.0.0.1:${port}`, keyPrefix: 'zcs:', log });
    stores.push(s);
    return s;
  };

  beforeAll(async () => {
    pair = await startReplicatedPair();
    primary = redisAt(pair.primary.port);
    replica = redisAt(pair.replica.port);
  }, 30_000);
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()));
    primary?.disconnect();
    replica?.disconnect();
    await pair?.stop();
  });

  it('starts a new epoch above every id issued before, which then get full data, never a delta', async () => {
    const before = storeOn(pair.primary.port);
    const issued: number[] = [];
    for (let t = 1; t <= 3; t++) issued.push((await before.merge('r', obs(t, { 1: [t, t], 2: [1, t] }))).lastId);
    expect(await primary.wait(1, 2_000)).toBe(1); // the replica has these
    // The replica is promoted here; what the old primary accepts from now on, it never sees.
    await replica.replicaof('NO', 'ONE');
    for (let t = 4; t <= 6; t++) issued.push((await before.merge('r', obs(t, { 1: [t, t], 3: [t, t] }))).lastId);
    const highest = Math.max(...issued);

    // A replica of the shim that never saw those ids, on the new primary.
    const after = storeOn(pair.replica.port);
    expect(await after.load('r')).toBeUndefined(); // the lagging copy is not vouched for
    const s = await after.merge('r', obs(7, { 1: [7, 7], 2: [1, 7] }));
    expect(s.epoch).toBeGreaterThanOrEqual(highest);
    expect(s.lastId).toBeGreaterThan(highest);
    for (const id of issued) {
      expect(vouchesFor(s, id)).toBe(false);
      expect(answer(s, { visible: [1, 2], lastUpdateId: id, serverTimestamp: 7 }).full).toBe(true);
    }
    // From then on the new primary's ledger is vouched for, by every replica of the shim.
    expect(await storeOn(pair.replica.port).load('r')).toEqual(s);
    const next = await after.merge('r', obs(8, { 1: [8, 8], 2: [1, 8] }));
    expect(vouchesFor(next, s.lastId)).toBe(true);
  });

  it('does not continue a ledger this process knows when the new primary holds it but another replica wrote past it', async () => {
    const a = storeOn(pair.primary.port);
    await a.merge('r2', obs(1, { 1: [1, 1] }));
    // The new primary got this value (the replica was promoted in the test before: copy it).
    const key = a.key('r2');
    await replica.set(key, (await primary.getBuffer(key))!);
    // Another replica of the shim writes past it on the old primary: lost in the failover.
    const lost = await storeOn(pair.primary.port).merge('r2', obs(2, { 1: [2, 2], 2: [2, 2] }));
    // `a` is moved to the new primary, as Sentinel would move it; it still knows the value there.
    const conn = a.conn.redis as Redis;
    conn.options.port = pair.replica.port;
    const ready = new Promise((r) => conn.once('ready', r));
    conn.disconnect(true);
    await ready;
    const s = await a.merge('r2', obs(3, { 1: [3, 3] }));
    expect(s.epoch).toBeGreaterThanOrEqual(lost.lastId);
    expect(vouchesFor(s, lost.lastId)).toBe(false);
    expect(answer(s, { visible: [1], lastUpdateId: lost.lastId, serverTimestamp: 3 }).full).toBe(true);
  });
});

describeRedisServers('a Redis restarted from its append-only file (P5)', () => {
  let redis: PersistentRedis;
  const stores: RedisStore[] = [];
  const log = createLogger('silent');

  beforeAll(async () => {
    redis = await startPersistentRedis();
  }, 30_000);
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()));
    await redis?.stop();
  });

  it('does not vouch for a ledger read back from disk: a new epoch above it (writes after the last fsync may be gone)', async () => {
    const store = new RedisStore({ ...REDIS_STORE_BUDGETS, url: `redis://127.0.0.1:${redis.server.port}`, keyPrefix: 'zcs:', log });
    stores.push(store);
    const before = await store.merge('r', obs(1, { 1: [1, 1] }));
    await redis.restart();
    const admin = redisAt(redis.server.port);
    expect(await admin.exists(store.key('r'))).toBe(1); // read back from the append-only file
    admin.disconnect();
    const fresh = new RedisStore({ ...REDIS_STORE_BUDGETS, url: `redis://127.0.0.1:${redis.server.port}`, keyPrefix: 'zcs:', log });
    stores.push(fresh);
    expect(await fresh.load('r')).toBeUndefined();
    const after = await fresh.merge('r', obs(2, { 1: [2, 2] }));
    expect(after.epoch).toBeGreaterThanOrEqual(before.lastId);
    expect(vouchesFor(after, before.lastId)).toBe(false);
  });
});
