import type { Redis } from 'ioredis';
import request from 'supertest';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFake } from './support/fake-zulip.js';
import { adminRedis, deleteKeysUnder, describeRedis, REDIS_URL } from './support/redis.js';
import { replicaSuite } from './support/replica-suite.js';
import { startShim } from './support/shim.js';

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
