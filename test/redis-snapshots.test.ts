import type { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createLogger } from '../src/observability/logger.js';
import type { PublishedSnapshot, SnapshotData } from '../src/presence/snapshots.js';
import { RedisConnection } from '../src/store/redis-connection.js';
import { RedisSnapshots } from '../src/store/redis-snapshots.js';
import { adminRedis, deleteKeysUnder, describeRedis, REDIS_URL, testKeyPrefix } from './support/redis.js';
import { redisKey } from '../src/store/redis-keys.js';

/**
 * Cross-replica snapshot sharing on Redis (P9, S1): one upstream fetch per shared scope per window
 * whichever replica is asked, the others reading what it published.
 */

const data = (serverTimestamp: number): SnapshotData => ({
  serverTimestamp,
  modernError: undefined,
  legacyUsers: 1,
  legacyBytes: Buffer.from('{"result":"success","msg":"","presences":{"a@example.com":{}}}'),
});

/** What a replica reading a published snapshot sees at once: everything but the legacy bytes. */
async function seen(p: PublishedSnapshot | undefined) {
  if (!p) return undefined;
  const { readLegacyBytes, ...rest } = p.data;
  return { ...rest, legacyBytes: await readLegacyBytes?.() };
}

describeRedis('RedisSnapshots: one fetch per shared scope per window, across replicas (P9, S1)', () => {
  const prefix = testKeyPrefix();
  const log = createLogger('silent');
  let admin: Redis;
  let conns: RedisConnection[];
  let a: RedisSnapshots;
  let b: RedisSnapshots;

  beforeAll(() => {
    admin = adminRedis();
    conns = [0, 1].map(() => new RedisConnection({ url: REDIS_URL, log }));
    [a, b] = conns.map((c) => new RedisSnapshots(c, { keyPrefix: prefix })) as [RedisSnapshots, RedisSnapshots];
  });
  afterAll(async () => {
    await Promise.all(conns.map((c) => c.close()));
    await deleteKeysUnder(admin, prefix);
    admin.disconnect();
  });

  it('lets one replica fetch; the other waits and reads what it published', async () => {
    expect(await a.get('s1')).toBeUndefined();
    expect(await a.tryLock('s1', 60_000)).toBe(true);
    expect(await b.tryLock('s1', 60_000)).toBe(false);
    const waiting = b.waitFor('s1', 60_000);
    await a.publish('s1', data(42), 60_000);
    // Woken by the notification, long before the wait's timeout.
    expect(await seen(await waiting)).toEqual(data(42));
    expect(await seen(await b.get('s1'))).toEqual(data(42));
    const ttl = await admin.pttl(redisKey(prefix, 'snap', 's1'));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(60_000);
  });

  it('does not lock a scope whose snapshot is already published in this window', async () => {
    expect(await a.tryLock('s2', 60_000)).toBe(true);
    await a.publish('s2', data(1), 30_000);
    expect(await admin.exists(redisKey(prefix, 'snap-lock', 's2'))).toBe(0);
    // The key lives for what is left of the window, not a whole window more.
    expect(await admin.pttl(redisKey(prefix, 'snap', 's2'))).toBeLessThanOrEqual(30_000);
    expect((await b.get('s2'))?.remainingMs).toBeLessThanOrEqual(30_000);
    // A replica that looked just before the publish must not fetch a second time.
    expect(await b.tryLock('s2', 60_000)).toBe(false);
    expect(await seen(await b.waitFor('s2', 10_000))).toEqual(data(1));
  });

  it('a waiter stops waiting at once when the fetcher gives up, and may then fetch itself', async () => {
    expect(await a.tryLock('s3', 60_000)).toBe(true);
    const waiting = b.waitFor('s3', 60_000);
    await a.release('s3');
    expect(await waiting).toBeUndefined();
    expect(await b.tryLock('s3', 60_000)).toBe(true);
  });

  it('releases only its own lock (one that expired and was taken by another replica stays)', async () => {
    expect(await a.tryLock('s4', 1)).toBe(true);
    await expect.poll(() => admin.exists(redisKey(prefix, 'snap-lock', 's4'))).toBe(0);
    expect(await b.tryLock('s4', 60_000)).toBe(true);
    await a.release('s4');
    expect(await admin.exists(redisKey(prefix, 'snap-lock', 's4'))).toBe(1);
  });

  it("keeps the legacy bytes apart: a replica reads only the header unless it asks for them, and never another publish's bytes", async () => {
    expect(await a.tryLock('s6', 60_000)).toBe(true);
    await a.publish('s6', data(7), 20_000);
    const header = await admin.getBuffer(redisKey(prefix, 'snap', 's6'));
    expect(header!.length).toBeLessThan(200);
    expect(header!.includes('a@example.com')).toBe(false);
    const first = (await b.get('s6'))!;
    expect(first.data.legacyBytes).toBeUndefined();
    // The bytes outlive the header by a window and more: a replica answering from it finds them.
    const [legacyKey] = await admin.keys(`${redisKey(prefix, 'snap-legacy', 's6', '')}*`);
    expect(await admin.pttl(legacyKey!)).toBeGreaterThan(20_000);
    // The next window's publish: the first header still reads its own bytes.
    await admin.del(redisKey(prefix, 'snap', 's6'));
    expect(await b.tryLock('s6', 60_000)).toBe(true);
    await b.publish('s6', { ...data(8), legacyBytes: Buffer.from('{"result":"success","msg":"","presences":{}}') }, 20_000);
    expect(await first.data.readLegacyBytes!()).toEqual(data(7).legacyBytes);
    expect((await seen(await a.get('s6')))?.legacyBytes?.toString()).toBe('{"result":"success","msg":"","presences":{}}');
  });

  it('treats a value it cannot read as no snapshot', async () => {
    await admin.set(redisKey(prefix, 'snap', 's5'), 'garbage', 'PX', 60_000);
    expect(await a.get('s5')).toBeUndefined();
  });
});
