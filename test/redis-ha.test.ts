import { randomBytes } from 'node:crypto';
import type { Cluster } from 'ioredis';
import request from 'supertest';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import type { RedisStore } from '../src/store/redis.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { testKeyPrefix } from './support/redis.js';
import {
  clusterDeleteKeysUnder,
  clusterKeysUnder,
  describeRedisServers,
  startRedisCluster,
  startSentinelGroup,
  type RedisClusterProcesses,
  type SentinelGroup,
} from './support/redis-servers.js';
import { pollThrough, prng, replicaSuite, type Modern, type PollAnswer } from './support/replica-suite.js';
import { realmKeyOf } from './support/realm-key.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * Redis without a single point of failure (S1 on Sentinel and Cluster): the replica suite on a
 * three-primary Cluster, and a Sentinel failover (the primary killed while clients poll through
 * two replicas) that no client notices beyond full answers during the failover window (P5, P6,
 * X1, E4). Servers are the test's own, on free ports; they are killed afterwards.
 */

describeRedisServers('replicas on a Redis Cluster of three primaries (S1)', () => {
  let cluster: RedisClusterProcesses;
  let admin: Cluster;

  beforeAll(async () => {
    cluster = await startRedisCluster();
    admin = cluster.admin();
  }, 30_000);
  afterAll(async () => {
    admin?.disconnect();
    await cluster?.stop();
  });

  replicaSuite(() => ({ store: { redisCluster: cluster.nodeList }, deleteKeysUnder: (prefix) => clusterDeleteKeysUnder(admin, prefix) }));

  it('keeps every key of a realm in one slot, and spreads realms over the primaries', async () => {
    const prefix = testKeyPrefix();
    const fake = await startFake({ era: '4.0', users: 4 });
    const shims: RunningShim[] = [];
    try {
      for (const u of fake.humans()) fake.report(u.user_id, 'active');
      for (let i = 0; i < 2; i++) {
        shims.push(
          // Twelve new realms from this one address: more than an address's share (X12).
          await startShim(fake.url, {
            store: { redisCluster: cluster.nodeList, keyPrefix: prefix },
            presence: { coalesceMs: 60_000, newRealmsPerAddressPerMinute: 120 },
          }),
        );
      }
      // Names as varied as real ones (CRC16 keeps names one character apart in nearby slots).
      const hosts = Array.from({ length: 12 }, () => `${randomBytes(6).toString('hex')}.example.com`);
      for (const host of hosts) {
        for (const shim of shims) {
          const r = await request(shim.url)
            .post('/api/v1/users/me/presence')
            .set('Host', host)
            .set('Authorization', fake.auth(10))
            .type('form')
            .send({ status: 'active', slim_presence: 'true' });
          expect(r.status).toBe(200);
        }
      }
      const keys = await clusterKeysUnder(admin, prefix);
      const byRealm = new Map<string, Set<number>>();
      for (const key of keys) {
        // The realm the upstream names for the Host (X12) closes the key's hash tag.
        const host = hosts.find((h) => key.includes(`|realm:https://${h}}`))!;
        expect(host).toBeDefined();
        const slots = byRealm.get(host) ?? new Set<number>();
        slots.add(Number(await admin.cluster('KEYSLOT', key)));
        byRealm.set(host, slots);
      }
      expect(byRealm.size).toBe(hosts.length);
      for (const slots of byRealm.values()) expect(slots.size).toBe(1);
      // Each realm has its ledger and its shared snapshot there (P9 across replicas on a Cluster).
      expect(keys.filter((k) => k.endsWith(':presence'))).toHaveLength(hosts.length);
      expect(keys.filter((k) => k.includes(':snap|'))).toHaveLength(hosts.length);
      // CLUSTER SLOTS: [start, end, [host, port, id], …] per range.
      const ranges = await admin.cluster('SLOTS');
      const nodeOf = (slot: number) => ranges.find(([start, end]) => slot >= start && slot <= end)![2]![1];
      const nodes = new Set([...byRealm.values()].map((slots) => nodeOf([...slots][0]!)));
      expect(nodes.size).toBeGreaterThan(1);
    } finally {
      await Promise.all(shims.map((s) => s.close()));
      await fake.stop();
      await clusterDeleteKeysUnder(admin, prefix);
    }
  });
});

describeRedisServers('a Sentinel failover while clients poll through two replicas (P5, P6, X1)', () => {
  let group: SentinelGroup;
  let fake: FakeZulip;
  let shims: RunningShim[] = [];

  beforeAll(async () => {
    group = await startSentinelGroup({ downAfterMs: 400, failoverTimeoutMs: 2_000 });
  }, 30_000);
  afterEach(async () => {
    await Promise.all(shims.map((s) => s.close()));
    shims = [];
    await fake?.stop();
  });
  afterAll(async () => {
    await group?.stop();
  });

  it('answers every request, never moves an id backwards, and ends with every client holding the upstream’s data', async () => {
    fake = await startFake({ era: '5.0', users: 8 });
    const users = fake.humans().map((u) => u.user_id);
    for (const u of users) fake.report(u, 'active');
    const store = { redisSentinels: group.sentinelList, redisSentinelName: group.name, keyPrefix: testKeyPrefix() };
    for (let i = 0; i < 2; i++) shims.push(await startShim(fake.url, { store, presence: { coalesceMs: 100 } }));
    for (const s of shims) await expect.poll(() => (s.shim.context.store as RedisStore).conn.redis.status).toBe('ready');

    const clients = users.map((user) => ({ user, id: -1, map: {} as Modern, polls: 0 }));
    const statuses = new Map<number, number>();
    const backwards: string[] = [];
    let polling = true;
    let phase = 'before the kill';
    let changing = true;

    const next = prng(16);
    const changes = (async () => {
      while (changing) {
        fake.advance(1 + next(30));
        fake.report(users[next(users.length)]!, next(2) ? 'active' : 'idle');
        await new Promise((r) => setTimeout(r, 40));
      }
    })();
    const pollers = clients.map(async (c, i) => {
      while (polling) {
        const r = await pollThrough(shims[(i + c.polls) % shims.length]!, fake, c.user, c.id);
        c.polls++;
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (r.status !== 200) continue;
        const a = r.body as PollAnswer;
        if (a.presence_last_update_id < c.id) backwards.push(`user ${c.user}, ${phase}: ${c.id} -> ${a.presence_last_update_id}`);
        Object.assign(c.map, a.presences);
        c.id = a.presence_last_update_id;
      }
    });

    // Some traffic on the first primary, then it crashes.
    await expect.poll(() => Math.min(...clients.map((c) => c.polls)), { timeout: 10_000 }).toBeGreaterThan(10);
    const highestBefore = Math.max(...clients.map((c) => c.id));
    const killedAt = Date.now();
    phase = 'in the failover window';
    await group.primary.kill('SIGKILL');
    await expect.poll(() => group.primaryPort(), { timeout: 15_000, interval: 20 }).toBe(group.replica.port);
    const promotedMs = Date.now() - killedAt;
    // The failover window, as the shim sees it: until both replicas reach the new primary.
    const ready = async () => (await Promise.all(shims.map((s) => request(s.url).get('/readyz')))).every((r) => r.status === 200);
    await expect.poll(ready, { timeout: 15_000, interval: 20 }).toBe(true);
    const windowMs = Date.now() - killedAt;
    phase = 'after the failover';
    // Polls on the new primary, then the upstream stops changing and everyone catches up.
    const pollsAtRecovery = clients.map((c) => c.polls);
    await expect.poll(() => Math.min(...clients.map((c, i) => c.polls - pollsAtRecovery[i]!)), { timeout: 10_000 }).toBeGreaterThan(10);
    changing = false;
    await changes;
    await new Promise((r) => setTimeout(r, 150)); // one coalescing window: the next fetch sees the last change
    // A delta poll leading a fetch is answered before the fetch is taken in (B7): wait until one
    // replica has started a fetch after one of its own that began after the last change.
    const fullAtQuiet = fake.stats.presenceFull;
    await expect.poll(() => fake.stats.presenceFull, { timeout: 10_000 }).toBeGreaterThan(fullAtQuiet + 2);
    const pollsAtQuiet = clients.map((c) => c.polls);
    await expect.poll(() => Math.min(...clients.map((c, i) => c.polls - pollsAtQuiet[i]!)), { timeout: 10_000 }).toBeGreaterThan(4);
    polling = false;
    await Promise.all(pollers);

    const total = [...statuses.values()].reduce((a, b) => a + b, 0);
    console.info(
      `Sentinel failover: primary promoted ${promotedMs} ms after the kill; both replicas on the new primary after ${windowMs} ms; ` +
        `${total} polls, statuses ${JSON.stringify(Object.fromEntries(statuses))}`,
    );
    expect([...statuses.keys()]).toEqual([200]); // every request answered, none with a 5xx
    expect(backwards).toEqual([]);
    const truth = (await pollThrough(shims[0]!, fake, users[0]!, -1)).body as PollAnswer;
    expect(Object.keys(truth.presences)).toHaveLength(users.length);
    for (const c of clients) expect(c.map).toEqual(truth.presences);
    // The new primary's ledger is a new epoch: it vouches for no id issued before the kill, and
    // its ids are above all of them.
    const ledger = await (shims[0]!.shim.context.store as RedisStore).load(await realmKeyOf(shims[0]!, fake.url, 'chat.example.com'));
    expect(ledger!.epoch).toBeGreaterThanOrEqual(highestBefore);
    for (const c of clients) expect(c.id).toBeGreaterThan(highestBefore);
    // Ids issued on the new primary are vouched for by both replicas: deltas again, not full data.
    for (const [i, s] of shims.entries()) {
      const c = clients[i]!;
      const r = (await pollThrough(s, fake, c.user, c.id)).body as PollAnswer;
      expect(r.presence_last_update_id).toBe(c.id);
      expect(r.presences).toEqual({});
    }
  }, 60_000);
});
