import type { Redis } from 'ioredis';
import request from 'supertest';
import net from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { EVENT_WAIT } from './support/wait.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { adminRedis, deleteKeysUnder, describeRedis, keysUnder, REDIS_URL, testKeyPrefix } from './support/redis.js';
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

describeRedis('a client whose polls alternate between replicas, during a refresh (S1, X1, B7)', () => {
  let admin: Redis;
  const prefix = testKeyPrefix();
  const running: Array<{ close(): Promise<unknown> }> = [];
  beforeAll(() => {
    admin = adminRedis();
  });
  afterAll(async () => {
    for (const r of running.reverse()) await r.close();
    await deleteKeysUnder(admin, prefix);
    admin.disconnect();
  });

  it('is answered at once from the store when its id is newer than the replica copy, not held up by the refresh', async () => {
    // The test drives the shims' clock (Date only; timers stay real): a snapshot's 1 ms window
    // ends when the test moves the clock on, never while a poll is on its way. A replica lets go
    // of the realm's fetch lock just after its answer (nothing to publish: the window is over);
    // until then another replica would follow that fetch, not make its own (P9 across replicas).
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() });
    try {
      const fake = await startFake({ era: '4.0', users: 6 });
      running.push({ close: () => fake.stop() });
      for (const u of fake.humans()) fake.report(u.user_id, 'active');
      const settings = { store: { redisUrl: REDIS_URL, keyPrefix: prefix }, presence: { coalesceMs: 1 } };
      const r0 = await startShim(fake.url, settings);
      running.push(r0);
      const other = await startShim(fake.url, settings);
      running.push(other);
      const snapshotKeys = async () => (await keysUnder(admin, prefix)).filter((k) => k.includes('snap'));
      /** Every fetch lock let go of and nothing published; then the window of every snapshot held ends. */
      const windowOver = async () => {
        await vi.waitFor(async () => expect(await snapshotKeys()).toEqual([]), EVENT_WAIT);
        vi.setSystemTime(Date.now() + 1_000);
      };
      const users = fake.humans().map((u) => u.user_id);
      const first = await pollThrough(r0, fake, users[0]!, -1);
      await windowOver();
      expect((await pollThrough(other, fake, users[1]!, -1)).status).toBe(200); // the second replica's copy: this ledger
      await windowOver();
      // A change only the first replica fetches: the client's id is then above the second's copy.
      fake.advance(30);
      fake.report(users[2]!, 'idle');
      // A full poll: a delta poll leading the refresh would be answered before it (B7).
      const newer = await pollThrough(r0, fake, users[0]!, -1);
      const id = newer.body.presence_last_update_id as number;
      expect(id).toBeGreaterThan(first.body.presence_last_update_id as number);
      await windowOver();
      // The second replica's next refresh is slow.
      let release!: () => void;
      fake.fullPresenceHeld = new Promise<void>((r) => {
        release = r;
      });
      const fullBefore = fake.stats.presenceFull;
      let refreshed = false;
      const refresh = pollThrough(other, fake, users[3]!, -1).then((r) => {
        refreshed = true;
        return r;
      });
      await vi.waitFor(() => expect(fake.stats.presenceFull).toBe(fullBefore + 1), EVENT_WAIT);
      const bounced = await pollThrough(other, fake, users[0]!, id);
      expect(bounced.status).toBe(200);
      expect(refreshed).toBe(false); // answered before the refresh completed
      expect(bounced.body.presence_last_update_id).toBeGreaterThanOrEqual(id); // X1
      expect(bounced.body.presences).toEqual({}); // nothing changed after its id
      release();
      fake.fullPresenceHeld = undefined;
      expect((await refresh).status).toBe(200);
    } finally {
      vi.useRealTimers();
    }
  });

  /**
   * A 2.1 realm of 6 users behind two replicas (a 400 ms window), a client's id from the first,
   * and the second replica's copy vouching for it.
   */
  async function twoReplicasAtOneId(presence: { leaderWaitMs?: number } = {}) {
    const fake = await startFake({ era: '2.1', users: 6 });
    running.push({ close: () => fake.stop() });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    const window = 400;
    const settings = { store: { redisUrl: REDIS_URL, keyPrefix: prefix }, presence: { coalesceMs: window, ...presence } };
    const [r0, r1] = [await startShim(fake.url, settings), await startShim(fake.url, settings)];
    running.push(r0, r1);
    const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const send = (shim: RunningShim, user: number, id: number) => pollThrough(shim, fake, user, id).then((r) => r);
    const within = <T>(answer: Promise<T>, ms: number) => Promise.race([answer, pause(ms).then(() => 'late' as const)]);
    const users = fake.humans().map((u) => u.user_id);
    const id = (await send(r0, users[0]!, -1)).body.presence_last_update_id as number;
    await pause(window + 50);
    expect((await send(r1, users[3]!, -1)).status).toBe(200); // the second replica's copy vouches for `id`
    /**
     * A change only the next refresh brings, over a slow link: the upstream's full answer drips
     * until `end()` (and is then cut off before its end, with `cut`).
     */
    const slowNextRefresh = async (cut = false) => {
      fake.advance(30);
      fake.report(users[1]!, 'active');
      await pause(window + 50);
      let release!: () => void;
      fake.fullPresenceDrip = { ms: 1_000, until: new Promise<void>((r) => (release = r)), cut };
      return {
        fullBefore: fake.stats.presenceFull,
        end() {
          fake.fullPresenceDrip = undefined;
          release();
        },
      };
    };
    return { fake, r0, r1, send, within, pause, users, id, window, slowNextRefresh };
  }

  it('leading a refresh with a delta poll: answered before the refresh ends on the replica fetching it and on one waiting for it; one fetch for both (P9)', async () => {
    const { fake, r0, r1, send, within, pause, users, id, window, slowNextRefresh } = await twoReplicasAtOneId();
    // The first replica's copy moves past the client's id.
    fake.advance(30);
    fake.report(users[2]!, 'active', 'ZulipMobile');
    await pause(window + 50);
    const other = await send(r0, users[3]!, -1);
    const after = { [users[2]!]: other.body.presences[users[2]!], [users[3]!]: other.body.presences[users[3]!] };
    const { fullBefore, end } = await slowNextRefresh();
    let followingId = id;
    try {
      // The first replica takes the lock and fetches; its leader is answered from the ledger.
      const fetching = await within(send(r0, users[0]!, id), 5_000);
      expect(fetching).not.toBe('late');
      // The second replica's leader follows it (a ping), and is answered before it publishes.
      const following = await within(send(r1, users[2]!, id), 5_000);
      expect(following).not.toBe('late');
      // 2.1: each caller's own report is in its answer (P15).
      const own = { active_timestamp: Math.floor(fake.now), idle_timestamp: Math.floor(fake.now) };
      for (const [early, caller] of [
        [fetching, users[0]!],
        [following, users[2]!],
      ] as const) {
        if (early === 'late') continue;
        expect(early.status).toBe(200);
        const { [caller]: itself, ...others } = early.body.presences;
        expect(itself).toEqual(own);
        // What each replica's copy had after the client's id (X1: a copy that vouches for it),
        // the first caller's own report included once the second replica read it.
        expect({ ...after, [users[0]!]: own }).toMatchObject(others);
        expect(early.body.presence_last_update_id).toBeGreaterThanOrEqual(id);
      }
      if (fetching !== 'late') expect(fetching.body.presences).toEqual({ ...after, [users[0]!]: own });
      expect(fake.stats.presenceFull).toBe(fullBefore + 1);
      if (following !== 'late') followingId = following.body.presence_last_update_id as number;
    } finally {
      end();
    }
    // A full poll at the second replica waited for the first one's snapshot: one fetch for both.
    const full = await send(r1, users[4]!, -1);
    expect(full.body.presences[users[1]!].active_timestamp).toBe(Math.floor(fake.now));
    expect(fake.stats.presenceFull).toBe(fullBefore + 1);
    // The early-answered client's next poll gets what the refresh brought, with larger ids (P6, X1).
    const next = await send(r1, users[2]!, followingId);
    expect(next.body.presence_last_update_id).toBeGreaterThan(followingId);
    expect(next.body.presences[users[1]!]).toEqual(full.body.presences[users[1]!]);
  });

  it("a leader following another replica's fetch under way does not wait for it: answered while that replica's leader still waits (S1, B7)", async () => {
    // The fetching leader's wait is a minute here: only a leader that does not wait is answered.
    const { fake, r0, r1, send, within, users, id, slowNextRefresh } = await twoReplicasAtOneId({ leaderWaitMs: 60_000 });
    const { fullBefore, end } = await slowNextRefresh();
    let fetchingAnswered = false;
    const fetching = send(r0, users[0]!, id).then((r) => {
      fetchingAnswered = true;
      return r;
    });
    try {
      await vi.waitFor(() => expect(fake.stats.presenceFull).toBe(fullBefore + 1), EVENT_WAIT);
      // The second replica's leader follows that fetch (its report a ping), answered from the ledger.
      const following = await within(send(r1, users[2]!, id), 5_000);
      expect(following === 'late' ? 'late' : following.status).toBe(200);
      if (following !== 'late') expect(following.body.presence_last_update_id).toBeGreaterThanOrEqual(id); // X1
      expect(fetchingAnswered).toBe(false);
      expect(fake.stats.presenceFull).toBe(fullBefore + 1);
    } finally {
      end();
    }
    // The fetching leader waited for its own fetch, and has what it brought.
    const fetched = await fetching;
    expect(fetched.body.presences[users[1]!].active_timestamp).toBe(Math.floor(fake.now));
  });

  it('a leader answered early while following another replica sends no second full report when that replica gives up (P9)', async () => {
    const { fake, r0, r1, send, within, users, id, slowNextRefresh } = await twoReplicasAtOneId();
    // The next refresh's body is cut before its end: the first replica's fetch fails.
    const { fullBefore, end } = await slowNextRefresh(true);
    try {
      expect(await within(send(r0, users[0]!, id), 5_000)).not.toBe('late');
      // The second replica's leader follows the first (a ping) and has its answer before the cut.
      const following = await within(send(r1, users[2]!, id), 5_000);
      expect(following === 'late' ? 'late' : following.status).toBe(200);
    } finally {
      end();
    }
    await vi.waitFor(() => expect(r1.logs.join('')).toContain('presence refresh failed after its leader was answered'), EVENT_WAIT);
    // Its client has its answer: a full report sent for it now would be one the shim made up.
    expect(fake.stats.presenceFull).toBe(fullBefore + 1);
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
