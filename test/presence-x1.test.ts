import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { ERAS, startFake, type Era, type FakeZulip } from './support/fake-zulip.js';
import { describeRedis, REDIS_URL, suiteKeyPrefix } from './support/redis.js';
import { startShim, type RunningShim } from './support/shim.js';
import { memoryStore } from './support/budgets.js';

/**
 * X1: ids never go backwards and no user's data reverts, across register, polls answered from
 * a shared snapshot, replicas, and ids the shim never issued.
 */

type Modern = Record<string, { active_timestamp: number; idle_timestamp: number }>;

const OLD_ERAS = ERAS.filter((e) => e !== '9.0');
/** The web app's server_presence_offline_threshold_seconds. */
const OFFLINE_THRESHOLD = 140;

/**
 * The web app's presence state (web/src/presence.ts): `set_info` updates the users in an answer
 * and recomputes everyone's status against the answer's server_timestamp.
 */
class WebAppPresence {
  info = new Map<string, { active_timestamp: number; idle_timestamp: number }>();
  serverTime = 0;
  lastUpdateId = -1;

  setInfo(body: { presences: Modern; server_timestamp: number; presence_last_update_id: number }): void {
    for (const [userId, p] of Object.entries(body.presences)) this.info.set(userId, p);
    this.serverTime = body.server_timestamp;
    this.lastUpdateId = body.presence_last_update_id;
  }

  status(userId: number): 'active' | 'idle' | 'offline' {
    const p = this.info.get(String(userId));
    if (p && this.serverTime - p.active_timestamp < OFFLINE_THRESHOLD) return 'active';
    if (p && this.serverTime - p.idle_timestamp < OFFLINE_THRESHOLD) return 'idle';
    return 'offline';
  }
}

let fake: FakeZulip;
let shims: RunningShim[] = [];
afterEach(async () => {
  await Promise.all(shims.map((s) => s.close()));
  shims = [];
  await fake?.stop();
});

async function upstream(era: Era): Promise<FakeZulip> {
  fake = await startFake({ era });
  for (const u of fake.humans()) fake.report(u.user_id, 'active');
  return fake;
}

const poll = (shim: RunningShim, user: number, form: Record<string, string>) =>
  request(shim.url)
    .post('/api/v1/users/me/presence')
    .set('Host', 'chat.example.com')
    .set('Authorization', fake.auth(user))
    .type('form')
    .send(form);
const register = (shim: RunningShim, user: number, form: Record<string, string>) =>
  request(shim.url).post('/api/v1/register').set('Host', 'chat.example.com').set('Authorization', fake.auth(user)).type('form').send(form);

/**
 * User 13 is idle when the first snapshot is taken, active again before the register: the
 * register shows them active; a poll in the same window must not take that back.
 */
async function registerThenPoll(pollVia: RunningShim, registerVia: RunningShim) {
  fake.advance(300);
  fake.report(13, 'idle');
  const first = await poll(pollVia, 11, { status: 'active', last_update_id: '-1' });
  expect(first.status).toBe(200);
  fake.advance(100);
  fake.report(13, 'active');
  const web = new WebAppPresence();
  const reg = await register(registerVia, 10, { slim_presence: 'true', fetch_event_types: '["presence"]' });
  expect(reg.status).toBe(200);
  web.setInfo(reg.body);
  expect(web.status(13)).toBe('active');
  const registered = reg.body as { presences: Modern; presence_last_update_id: number };
  // Answered from the snapshot taken before the register (the window is a minute long).
  const next = await poll(pollVia, 10, { status: 'active', last_update_id: String(registered.presence_last_update_id) });
  expect(next.status).toBe(200);
  expect(next.body.presence_last_update_id).toBeGreaterThanOrEqual(registered.presence_last_update_id);
  for (const [userId, p] of Object.entries(next.body.presences as Modern)) {
    expect(p.idle_timestamp).toBeGreaterThanOrEqual(registered.presences[userId]?.idle_timestamp ?? 0);
  }
  web.setInfo(next.body);
  expect(web.status(13)).toBe('active');
  return { registered, next: next.body as { presences: Modern; presence_last_update_id: number } };
}

describe.each(['2.1', '7.0'] as const)('register, then a poll from the snapshot taken before it, on %s (X1, P6)', (era) => {
  it('the poll continues from the register id and no user reverts', async () => {
    await upstream(era);
    const shim = await startShim(fake.url, { presence: { coalesceMs: 60_000 } });
    shims.push(shim);
    const { next } = await registerThenPoll(shim, shim);
    // Nothing changed since the register but the caller's own report: a delta, not older full
    // data. On 2.1 the report is in it (P15); from 3.0 the shim cannot tell a report the upstream
    // dropped (invisible mode) from one it took, and leaves it to the next snapshot.
    const own = { active_timestamp: Math.floor(fake.now), idle_timestamp: Math.floor(fake.now) };
    expect(next.presences).toEqual(era === '2.1' ? { '10': own } : {});
    expect(fake.stats.presenceFull).toBe(1);
  });
});

describe.each(OLD_ERAS)('an id the shim never issued, on %s (X1)', (era) => {
  it('gets full data with an id at least the one sent', async () => {
    await upstream(era);
    const shim = await startShim(fake.url, { presence: { coalesceMs: 0 } });
    shims.push(shim);
    const full = await poll(shim, 10, { status: 'active', last_update_id: '-1' });
    const issued = full.body.presence_last_update_id as number;
    for (const sent of [issued + 1_000_000, 2 ** 52]) {
      const r = await poll(shim, 10, { status: 'active', last_update_id: String(sent) });
      expect(r.status).toBe(200);
      expect(Object.keys(r.body.presences).sort()).toEqual(
        fake
          .humans()
          .map((u) => String(u.user_id))
          .sort(),
      );
      expect(r.body.presence_last_update_id).toBeGreaterThanOrEqual(sent);
    }
    // Beyond what a double holds exactly: echoed digit for digit, never rounded below.
    const huge = '99999999999999999999';
    const big = await poll(shim, 10, { status: 'active', last_update_id: huge });
    expect(big.text).toContain(`"presence_last_update_id":${huge}}`);
    // An implausible id moved nothing for everyone else: a fresh client gets the ledger's own ids.
    const other = await poll(shim, 11, { status: 'active', last_update_id: '-1' });
    expect(other.body.presence_last_update_id).toBeLessThan(2 ** 52);
  });
});

describe('a plausible id the shim cannot vouch for (X1)', () => {
  it('raises the counter past it, so the next poll is an exact delta', async () => {
    await upstream('5.0');
    let clockMs = Date.now();
    const store = memoryStore(10, () => clockMs);
    const shim = await startShim(fake.url, { presence: { coalesceMs: 0 } }, { store });
    shims.push(shim);
    const full = await poll(shim, 10, { status: 'active', last_update_id: '-1' });
    const issued = full.body.presence_last_update_id as number;
    clockMs += 60_000; // a minute later the clock allows ids up to a minute's microseconds higher
    const sent = issued + 30_000_000;
    const resync = await poll(shim, 10, { status: 'active', last_update_id: String(sent) });
    expect(Object.keys(resync.body.presences)).toHaveLength(fake.humans().length);
    // P4: the largest id among the users returned, each stamped just above the raised id (I6).
    const resynced = resync.body.presence_last_update_id as number;
    expect(resynced).toBe(sent + 1);
    fake.advance(120);
    fake.report(12, 'idle');
    const delta = await poll(shim, 10, { status: 'active', last_update_id: String(resynced) });
    expect(Object.keys(delta.body.presences).sort()).toEqual(['10', '12']);
    expect(delta.body.presence_last_update_id).toBeGreaterThan(resynced);
  });
});

interface VictimDeltas {
  users: number;
  bytes: number;
  deltas: number;
}

/**
 * Issue 43's forced-delta run at test scale: `victims` clients poll with the id of their
 * previous answer while, in every second, a few users report and (when `attacked`) one more
 * authenticated caller polls first with a made-up id the clock allows, then the id it was given.
 * Every answer's id is checked never to go below what the client held or sent (X1).
 */
async function victimDeltas(shim: RunningShim, attacked: boolean, rounds: number): Promise<VictimDeltas> {
  const humans = fake.humans().map((u) => u.user_id);
  const victims = humans.slice(1, 6).map((user) => ({ user, id: -1 }));
  for (const v of victims) v.id = (await poll(shim, v.user, { status: 'active', last_update_id: '-1' })).body.presence_last_update_id;
  const out: VictimDeltas = { users: 0, bytes: 0, deltas: 0 };
  let attackerId = -1;
  for (let round = 0; round < rounds; round++) {
    fake.advance(1);
    for (let i = 0; i < 4; i++) fake.report(humans[(round * 4 + i) % humans.length]!, i % 2 ? 'idle' : 'active');
    if (attacked) {
      // Made up (the clock in µs − 2 ms), or, every other second, the id it was given: both kinds of caller.
      const sent = round % 2 === 0 ? Date.now() * 1000 - 2000 : attackerId;
      const r = await poll(shim, humans[0]!, { status: 'active', last_update_id: String(sent) });
      expect(r.body.presence_last_update_id).toBeGreaterThanOrEqual(sent);
      if (round % 2 === 1) expect(Object.keys(r.body.presences).length).toBeLessThan(humans.length); // a delta again
      attackerId = r.body.presence_last_update_id;
    }
    for (const v of victims) {
      const r = await poll(shim, v.user, { status: 'active', last_update_id: String(v.id) });
      expect(r.body.presence_last_update_id).toBeGreaterThanOrEqual(v.id);
      v.id = r.body.presence_last_update_id;
      out.users += Object.keys(r.body.presences).length;
      out.bytes += Buffer.byteLength(r.text);
      out.deltas++;
    }
  }
  return out;
}

/** Victims' deltas without, then with, the caller sending made-up ids; the second within 2× of the first. */
async function forcedDeltas(store: { redisUrl?: string; keyPrefix?: string }): Promise<void> {
  const sizes: VictimDeltas[] = [];
  for (const attacked of [false, true]) {
    fake = await startFake({ era: '7.0', users: 300 });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    fake.advance(120); // past the upstream's 55 s between writes of a row: every report is a change
    const own = store.keyPrefix ? { ...store, keyPrefix: `${store.keyPrefix}${attacked}:` } : store;
    const shim = await startShim(fake.url, { store: own, presence: { coalesceMs: 0 } });
    shims.push(shim);
    sizes.push(await victimDeltas(shim, attacked, 12));
    await shim.close();
    shims = [];
    await fake.stop();
  }
  const [quiet, attacked] = sizes as [VictimDeltas, VictimDeltas];
  expect(quiet.users / quiet.deltas).toBeGreaterThan(1);
  // Users and bytes per victim delta within 2× of the run without that caller (before: the whole realm).
  expect(attacked.users / attacked.deltas).toBeLessThan((2 * quiet.users) / quiet.deltas);
  expect(attacked.bytes / attacked.deltas).toBeLessThan((2 * quiet.bytes) / quiet.deltas);
}

describe('a caller sending made-up ids the clock allows, every second (X1, I6)', () => {
  it("costs that caller, not the realm: others' deltas keep their size", async () => {
    await forcedDeltas({});
  });
});

describeRedis('a caller sending made-up ids the clock allows, every second, on Redis (X1, I6)', () => {
  const prefix = suiteKeyPrefix();
  it("costs that caller, not the realm: others' deltas keep their size", async () => {
    await forcedDeltas({ redisUrl: REDIS_URL, keyPrefix: prefix });
  });
});

describeRedis('two replicas on one Redis (X1, S1)', () => {
  const prefix = suiteKeyPrefix();

  async function replicas(era: Era, coalesceMs: number): Promise<[RunningShim, RunningShim]> {
    await upstream(era);
    const keyPrefix = `${prefix}${era}:${coalesceMs}:`;
    for (let i = 0; i < 2; i++)
      shims.push(await startShim(fake.url, { store: { redisUrl: REDIS_URL, keyPrefix }, presence: { coalesceMs } }));
    return [shims[0]!, shims[1]!];
  }

  it.each(['2.1', '7.0'] as const)(
    'on %s, a replica answers an id another one issued from the store, not its older snapshot',
    async (era) => {
      const [a, b] = await replicas(era, 60_000);
      await registerThenPoll(a, b);
    },
  );

  it('a client moving between replicas never gets a lower id', async () => {
    const [a, b] = await replicas('2.1', 60_000);
    let lastUpdateId = -1;
    for (let i = 0; i < 12; i++) {
      if (i % 3 === 0) {
        fake.advance(100);
        fake.report(10 + (i % 5), i % 2 ? 'idle' : 'active');
        // A register through the other replica merges a newer observation into the store.
        await register(i % 2 ? a : b, 11, { slim_presence: 'true' });
      }
      const r = await poll(i % 2 ? b : a, 10, { status: 'active', last_update_id: String(lastUpdateId) });
      expect(r.body.presence_last_update_id).toBeGreaterThanOrEqual(lastUpdateId);
      lastUpdateId = r.body.presence_last_update_id;
    }
  });
});
