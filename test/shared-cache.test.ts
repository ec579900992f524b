import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../src/observability/logger.js';
import { RedisStore } from '../src/store/redis.js';
import { SharedCache, type CacheBackend } from '../src/cache/shared-cache.js';
import { adminRedis, deleteKeysUnder, describeRedis, REDIS_URL, testKeyPrefix } from './support/redis.js';
import { redisKey } from '../src/store/redis-keys.js';
import { REDIS_STORE_BUDGETS } from './support/budgets.js';

/**
 * SharedCache (S1): a key loaded once for concurrent callers, failures not kept, in one process
 * or through Redis, where a value one replica loaded or changed reaches the others.
 */

interface Profile {
  id: number;
  name: string;
}

/** A budget these tests never reach. */
const BUDGET = { maxBytes: 1 << 20, footprint: (p: Profile, key: string) => ({ fixed: 200, strings: [key, p.name] }) };

function loader() {
  const calls: string[] = [];
  let release: () => void = () => {};
  const gate = new Promise<void>((r) => (release = r));
  return {
    calls,
    release,
    load: async (key: string, ctx: { caller: string }) => {
      calls.push(`${key} by ${ctx.caller}`);
      await gate;
      return { id: Number(key.split(':')[1]), name: `user ${key}` } satisfies Profile;
    },
  };
}

function lookups() {
  const seen: string[] = [];
  return { seen, inc: (l: { cache: string; result: string }) => void seen.push(`${l.cache}:${l.result}`) };
}

describe('SharedCache in one process', () => {
  it('loads a key once for concurrent callers and serves it from memory afterwards', async () => {
    const l = loader();
    const m = lookups();
    const cache = new SharedCache<Profile, { caller: string }>({
      ...BUDGET,
      name: 'own_profile',
      ttlMs: 60_000,
      max: 10,
      load: l.load,
      lookups: m,
    });
    const gets = [cache.get('r:7', { caller: 'a' }), cache.get('r:7', { caller: 'b' }), cache.get('r:8', { caller: 'c' })];
    l.release();
    const [x, y, z] = await Promise.all(gets);
    expect(x).toEqual({ id: 7, name: 'user r:7' });
    expect(y).toBe(x);
    expect(z?.id).toBe(8);
    expect(await cache.get('r:7', { caller: 'd' })).toBe(x);
    expect(l.calls).toEqual(['r:7 by a', 'r:8 by c']);
    expect(m.seen.sort()).toEqual(['own_profile:hit', 'own_profile:hit', 'own_profile:miss', 'own_profile:miss']);
  });

  it('passes a failed load to the caller and does not keep it', async () => {
    let fail = true;
    const cache = new SharedCache<Profile>({
      ...BUDGET,
      name: 'x',
      ttlMs: 60_000,
      max: 10,
      load: async () => {
        if (fail) throw new Error('upstream said no');
        return { id: 1, name: 'one' };
      },
    });
    await expect(cache.get('k', undefined)).rejects.toThrow('upstream said no');
    fail = false;
    expect(await cache.get('k', undefined)).toEqual({ id: 1, name: 'one' });
  });

  it('still loads when the shared backend fails', async () => {
    const broken: CacheBackend = {
      get: () => Promise.reject(new Error('down')),
      set: () => Promise.reject(new Error('down')),
      delete: () => Promise.reject(new Error('down')),
    };
    const l = loader();
    l.release();
    const cache = new SharedCache<Profile, { caller: string }>({
      ...BUDGET,
      name: 'x',
      ttlMs: 60_000,
      max: 10,
      load: l.load,
      backend: broken,
    });
    expect(await cache.get('r:3', { caller: 'a' })).toEqual({ id: 3, name: 'user r:3' });
    await cache.set('r:3', { id: 3, name: 'changed' });
    expect(await cache.get('r:3', { caller: 'a' })).toEqual({ id: 3, name: 'changed' });
    await cache.delete('r:3');
    expect(l.calls).toEqual(['r:3 by a']);
  });
});

describeRedis('SharedCache through Redis (S1)', () => {
  const prefix = testKeyPrefix();
  const log = createLogger('silent');
  let admin: Redis;
  let one: RedisStore;
  let two: RedisStore;

  beforeAll(() => {
    admin = adminRedis();
    one = new RedisStore({ ...REDIS_STORE_BUDGETS, url: REDIS_URL, keyPrefix: prefix, log });
    two = new RedisStore({ ...REDIS_STORE_BUDGETS, url: REDIS_URL, keyPrefix: prefix, log });
  });
  afterAll(async () => {
    await Promise.all([one.close(), two.close()]);
    await deleteKeysUnder(admin, prefix);
    admin.disconnect();
  });

  const cacheOn = (store: RedisStore, load: (k: string, c: { caller: string }) => Promise<Profile>, ttlMs = 60_000) =>
    new SharedCache<Profile, { caller: string }>({ ...BUDGET, name: 'own_profile', ttlMs, max: 10, load, backend: store.cacheBackend });

  it('a value one replica loaded is read by another without loading it again', async () => {
    const l = loader();
    l.release();
    const a = cacheOn(one, l.load);
    const b = cacheOn(two, l.load);
    const v = await a.get('r:1', { caller: 'a' });
    expect(await b.get('r:1', { caller: 'b' })).toEqual(v);
    expect(l.calls).toEqual(['r:1 by a']);
    expect(JSON.parse((await admin.get(redisKey(prefix, 'cache', 'r:1', 'own_profile')))!)).toEqual(v);
    const ttl = await admin.pttl(redisKey(prefix, 'cache', 'r:1', 'own_profile'));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(60_000);
  });

  it('set and delete reach the other replicas through Redis', async () => {
    const l = loader();
    l.release();
    const a = cacheOn(one, l.load);
    await a.set('r:2', { id: 2, name: 'renamed' });
    expect(await cacheOn(two, l.load).get('r:2', { caller: 'b' })).toEqual({ id: 2, name: 'renamed' });
    await a.delete('r:2');
    expect(await admin.exists(redisKey(prefix, 'cache', 'r:2', 'own_profile'))).toBe(0);
    expect(l.calls).toEqual([]);
  });

  it('loads again when the shared value is not JSON', async () => {
    const l = loader();
    l.release();
    await admin.set(redisKey(prefix, 'cache', 'r:5', 'own_profile'), '{not json', 'PX', 60_000);
    expect(await cacheOn(one, l.load).get('r:5', { caller: 'a' })).toEqual({ id: 5, name: 'user r:5' });
    expect(l.calls).toEqual(['r:5 by a']);
  });
});
