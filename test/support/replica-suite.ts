import request from 'supertest';
import { afterEach, expect, it } from 'vitest';
import type { Config } from '../../src/config/index.js';
import { startFake, type Era, type FakeZulip } from './fake-zulip.js';
import { testKeyPrefix } from './redis.js';
import { startShim, type RunningShim } from './shim.js';

/**
 * Several shim replicas sharing one Redis in front of one upstream (S1): polls of the same
 * clients routed to any replica, in any order, keep the P-rules. The same suite runs on one
 * Redis (test/replicas.test.ts), on a Sentinel-managed primary and on a Redis Cluster
 * (test/redis-ha.test.ts).
 */

export type Modern = Record<string, { active_timestamp: number; idle_timestamp: number }>;

export interface PollAnswer {
  presences: Modern;
  presence_last_update_id: number;
  server_timestamp: number;
}

/** A small seeded generator, so a failing routing can be replayed. */
export function prng(seed: number) {
  let x = seed >>> 0 || 1;
  return (n: number) => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % n;
  };
}

/** Where the replicas' Redis is: the store settings (without keyPrefix) and how to wipe a prefix. */
export interface SharedRedis {
  store: Partial<Config['store']>;
  deleteKeysUnder(prefix: string): Promise<number>;
}

/** One client's poll through one shim; the Host is the realm's, as behind a load balancer. */
export async function pollThrough(shim: RunningShim, fake: FakeZulip, user: number, lastUpdateId: number) {
  return request(shim.url)
    .post('/api/v1/users/me/presence')
    .set('Host', 'chat.example.com')
    .set('Authorization', fake.auth(user))
    .type('form')
    .send({ status: 'active', last_update_id: String(lastUpdateId) });
}

/** Registers the suite's tests in the current describe(); `redis()` is read when a test starts. */
export function replicaSuite(redis: () => SharedRedis): void {
  const prefix = testKeyPrefix();
  let fake: FakeZulip;
  let replicas: RunningShim[] = [];

  afterEach(async () => {
    await Promise.all(replicas.map((r) => r.close()));
    replicas = [];
    await fake?.stop();
    await redis().deleteKeysUnder(prefix);
  });

  async function setup(era: Era, n: number, coalesceMs: number, users = 6) {
    fake = await startFake({ era, users });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    for (let i = 0; i < n; i++) {
      replicas.push(await startShim(fake.url, { store: { ...redis().store, keyPrefix: prefix }, presence: { coalesceMs } }));
    }
    for (const r of replicas) expect(r.shim.context.store.kind).toBe('redis');
  }

  async function poll(replica: number, user: number, lastUpdateId: number): Promise<PollAnswer> {
    const r = await pollThrough(replicas[replica]!, fake, user, lastUpdateId);
    expect(r.status).toBe(200);
    return r.body as PollAnswer;
  }

  it('ids only grow and no update is lost, whichever replica answers (P5, P6)', async () => {
    await setup('5.0', 3, 0);
    const next = prng(7);
    const clients = fake.humans().map((u) => ({ user: u.user_id, id: -1, map: {} as Modern }));
    let highest = 0;
    for (let step = 0; step < 60; step++) {
      if (next(3) === 0) {
        fake.advance(30 + next(200));
        fake.report(clients[next(clients.length)]!.user, next(2) ? 'active' : 'idle');
      }
      const c = clients[next(clients.length)]!;
      const a = await poll(next(replicas.length), c.user, c.id);
      expect(a.presence_last_update_id).toBeGreaterThanOrEqual(c.id); // nothing goes backwards
      const changed = Object.entries(a.presences).some(([u, p]) => JSON.stringify(c.map[u]) !== JSON.stringify(p));
      if (changed && c.id > 0) expect(a.presence_last_update_id).toBeGreaterThan(c.id);
      Object.assign(c.map, a.presences);
      c.id = a.presence_last_update_id;
      highest = Math.max(highest, c.id);
    }
    // Everyone reports once more at the same upstream second, then catches up by delta.
    for (const c of clients) Object.assign(c.map, (await poll(next(replicas.length), c.user, c.id)).presences);
    for (const c of clients) {
      const a = await poll(next(replicas.length), c.user, c.id);
      Object.assign(c.map, a.presences);
      c.id = a.presence_last_update_id;
    }
    const truth = (await poll(0, clients[0]!.user, -1)).presences;
    expect(Object.keys(truth)).toHaveLength(clients.length);
    for (const c of clients) expect(c.map).toEqual(truth);
    expect(Math.max(...clients.map((c) => c.id))).toBeGreaterThanOrEqual(highest);
  });

  it.each([
    ['2.1', 0],
    ['2.1', 1], // every poll past its window: each leads a refresh on its replica
    ['2.1', 5_000],
    ['5.0', 5_000],
  ] as const)(
    'an id any replica issued is vouched for by every replica: a client alternating replicas gets deltas (X1, S1; %s, coalesceMs %d)',
    async (era, coalesceMs) => {
      await setup(era, 3, coalesceMs, 30);
      const humans = fake.humans().length;
      let id = (await poll(0, 10, -1)).presence_last_update_id;
      const storeAway = async () => {
        let n = 0;
        for (const r of replicas)
          n += (await r.shim.context.metrics.presenceAnswers.get()).values.find((v) => v.labels.kind === 'store_away')?.value ?? 0;
        return n;
      };
      const awayBefore = await storeAway();
      let full = 0;
      let answers = 0;
      for (let step = 1; step <= 18; step++) {
        // Idle but for the client itself, whose own report may change now and then (P15).
        fake.advance(3);
        const a = await poll(step % replicas.length, 10, id);
        expect(a.presence_last_update_id).toBeGreaterThanOrEqual(id);
        const others = Object.keys(a.presences).filter((u) => u !== '10');
        answers++;
        if (others.length >= humans - 1) full++;
        id = a.presence_last_update_id;
      }
      // Not one switch of replica answered with the whole realm, but where a store call failed
      // meanwhile (a busy machine: the Redis command timeout), which S3 answers in full.
      expect({ full: full - ((await storeAway()) - awayBefore), answers }).toEqual({ full: 0, answers: 18 });
    },
  );

  it('after the shared keys are deleted, a client with an old id gets everything, never an empty answer (P5)', async () => {
    await setup('3.0', 2, 0);
    const first = await poll(0, 10, -1);
    const delta = await poll(1, 10, first.presence_last_update_id);
    expect(Object.keys(delta.presences).length).toBeLessThan(fake.humans().length);
    await redis().deleteKeysUnder(prefix);
    for (const [replica, user] of [
      [1, 10],
      [0, 11],
    ] as const) {
      const after = await poll(replica, user, delta.presence_last_update_id);
      expect(Object.keys(after.presences).sort()).toEqual(
        fake
          .humans()
          .map((u) => String(u.user_id))
          .sort(),
      );
      expect(after.presence_last_update_id).toBeGreaterThan(delta.presence_last_update_id);
    }
  });

  it('many concurrent callers spread over the replicas cause one full upstream fetch per window (P9)', async () => {
    await setup('4.0', 3, 60_000, 12);
    fake.resetStats();
    const users = fake.humans().map((u) => u.user_id);
    const callers = Array.from({ length: 30 }, (_, i) => poll(i % replicas.length, users[i % users.length]!, -1));
    const storeErrors = async () =>
      Promise.all(replicas.map(async (r) => (await r.shim.context.metrics.storeErrors.get()).values[0]?.value ?? 0));
    const errorsBefore = await storeErrors();
    const answers = await Promise.all(callers);
    // One fetch for the realm; a replica whose store call failed meanwhile (a busy machine: the
    // Redis command timeout) fetches for itself, as S1 says it must, and no other does.
    const errorsAfter = await storeErrors();
    const replicasWithErrors = errorsAfter.filter((n, i) => n > errorsBefore[i]!).length;
    expect(fake.stats.presenceFull).toBeGreaterThanOrEqual(1);
    expect(fake.stats.presenceFull).toBeLessThanOrEqual(1 + replicasWithErrors);
    // P9: every caller's own status still reached the upstream.
    expect(fake.stats.presenceFull + fake.stats.presencePing).toBe(30);
    const stamps = new Set(answers.map((a) => a.server_timestamp));
    expect(stamps.size).toBe(1);
    for (const a of answers) expect(Object.keys(a.presences)).toHaveLength(users.length);
  });
}
