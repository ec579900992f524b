import type { Redis } from 'ioredis';
import request from 'supertest';
import net from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { adminRedis, deleteKeysUnder, describeRedis, REDIS_URL, testKeyPrefix } from './support/redis.js';
import { pollThrough, replicaSuite } from './support/replica-suite.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * Several shim replicas sharing one Redis in front of one upstream (S1): polls of the same
 * clients routed to any replica, in any order, keep the P-rules (test/support/replica-suite.ts;
 * the same suite runs on Sentinel and Cluster in test/redis-ha.test.ts).
 */

describeRedis('several replicas sharing one Redis (S1)', () => {
  let admin: Redis;
  beforeAll(() => {
    admin = adminRedis();
  });
  afterAll(() => {
    admin.disconnect();
  });
  replicaSuite(() => ({ store: { redisUrl: REDIS_URL }, deleteKeysUnder: (prefix) => deleteKeysUnder(admin, prefix) }));
});

describeRedis('the legacy answer between replicas (2.1: one legacy snapshot feeds both formats)', () => {
  let admin: Redis;
  const prefix = testKeyPrefix();
  let fake: FakeZulip;
  let replicas: RunningShim[] = [];
  beforeAll(() => {
    admin = adminRedis();
  });
  afterEach(async () => {
    await Promise.all(replicas.map((r) => r.close()));
    replicas = [];
    await fake?.stop();
    await deleteKeysUnder(admin, prefix);
  });
  afterAll(() => {
    admin.disconnect();
  });

  async function setup() {
    fake = await startFake({ era: '2.1', users: 8 });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    for (let i = 0; i < 2; i++) {
      replicas.push(await startShim(fake.url, { store: { redisUrl: REDIS_URL, keyPrefix: prefix }, presence: { coalesceMs: 60_000 } }));
    }
    fake.resetStats();
  }
  const legacyPoll = (replica: number, user: number) =>
    request(replicas[replica]!.url)
      .post('/api/v1/users/me/presence')
      .set('Host', 'chat.example.com')
      .set('Authorization', fake.auth(user))
      .type('form')
      .send({ status: 'active' });
  const legacyKeys = () => admin.keys(`${prefix}*:snap-legacy:*`);

  it('a follower reads the published legacy bytes only for a legacy poll, and answers it as the fetching replica did', async () => {
    await setup();
    const users = fake.humans().map((u) => u.user_id);
    const modern = await pollThrough(replicas[0]!, fake, users[0]!, -1);
    expect(modern.status).toBe(200);
    const keys = await legacyKeys();
    expect(keys).toHaveLength(1);
    // The follower's modern polls need no legacy bytes: answered with them gone.
    await admin.rename(keys[0]!, `${prefix}aside`);
    const followerModern = await pollThrough(replicas[1]!, fake, users[1]!, -1);
    expect(followerModern.status).toBe(200);
    expect(followerModern.body.presences).toEqual(modern.body.presences);
    await admin.rename(`${prefix}aside`, keys[0]!);
    const [own, follower] = [await legacyPoll(0, users[2]!), await legacyPoll(1, users[3]!)];
    expect(follower.status).toBe(200);
    expect(follower.text).toBe(own.text);
    expect(Object.keys(follower.body.presences as object)).toHaveLength(users.length);
    // P9: one full upstream fetch for all four polls.
    expect(fake.stats.presenceFull).toBe(1);
    expect(fake.stats.presencePing).toBe(3);
  });

  it('a follower whose legacy bytes are gone fetches for itself: its legacy poll still gets the full legacy answer', async () => {
    await setup();
    const users = fake.humans().map((u) => u.user_id);
    expect((await pollThrough(replicas[0]!, fake, users[0]!, -1)).status).toBe(200);
    await admin.del(...(await legacyKeys()));
    const follower = await legacyPoll(1, users[1]!);
    expect(follower.status).toBe(200);
    expect(Object.keys(follower.body.presences as object)).toHaveLength(users.length);
    expect(follower.body.presence_last_update_id).toBeGreaterThan(0);
    expect(fake.stats.presenceFull).toBe(2);
  });
});

describe('a replica whose Redis cannot be reached (S1)', () => {
  it('is not ready, and still answers presence polls in full from the upstream', async () => {
    const closed = net.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as net.AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const fake = await startFake({ era: '5.0' });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    const shim = await startShim(fake.url, { store: { redisUrl: `redis://127.0.0.1:${port}`, keyPrefix: 'zcs-test-none:' } });
    try {
      expect(shim.shim.context.store.kind).toBe('redis');
      const ready = await request(shim.url).get('/readyz');
      expect(ready.status).toBe(503);
      const r = await request(shim.url)
        .post('/api/v1/users/me/presence')
        .set('Authorization', fake.auth(10))
        .type('form')
        .send({ status: 'active', last_update_id: '-1' });
      expect(r.status).toBe(200);
      expect(Object.keys(r.body.presences as object).sort()).toEqual(
        fake
          .humans()
          .map((u) => String(u.user_id))
          .sort(),
      );
    } finally {
      await shim.close();
      await fake.stop();
    }
  });
});
