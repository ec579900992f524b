import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import request from 'supertest';
import { toModern } from '../src/presence/convert.js';
import { startFake, type Era, type FakeZulip } from './support/fake-zulip.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * POST /register through the shim (R1, R2, P4, P12): presence in the format asked for with an id
 * to continue from, the rest of the answer untouched, upstream errors passed on, large answers
 * converted in full or passed on unbuffered.
 */

let fake: FakeZulip;
let shim: RunningShim;
afterEach(async () => {
  await shim?.close();
  await fake?.stop();
});

async function setup(era: Era, users = 6) {
  fake = await startFake({ era, users });
  for (const u of fake.humans()) fake.report(u.user_id, 'active');
  shim = await startShim(fake.url, { presence: { coalesceMs: 0 } });
}

const register = (user: number, form: Record<string, string>) =>
  request(shim.url).post('/api/v1/register').set('Authorization', fake.auth(user)).type('form').send(form);
const poll = (user: number, form: Record<string, string>) =>
  request(shim.url).post('/api/v1/users/me/presence').set('Authorization', fake.auth(user)).type('form').send(form);

describe.each(['2.1', '4.0', '7.0'] as const)('register on a Zulip %s upstream (R1, R2)', (era) => {
  it('gives presence_last_update_id, and a poll with it returns only later changes', async () => {
    await setup(era);
    const r = await register(10, { slim_presence: 'true', fetch_event_types: '["presence","realm_user"]' });
    expect(r.status).toBe(200);
    const ids = Object.keys(r.body.presences).sort();
    expect(ids).toEqual(
      fake
        .humans()
        .map((u) => String(u.user_id))
        .sort(),
    );
    for (const e of Object.values(r.body.presences) as Array<Record<string, number>>) {
      expect(Number.isInteger(e.active_timestamp) && Number.isInteger(e.idle_timestamp)).toBe(true);
    }
    expect(Number.isSafeInteger(r.body.presence_last_update_id)).toBe(true);
    expect(typeof r.body.server_timestamp).toBe('number');
    expect(r.body.queue_id).toBeTruthy();
    expect(r.body.realm_users).toHaveLength(fake.humans().length);

    fake.advance(120);
    fake.report(13, 'idle');
    const d = await poll(10, { status: 'active', last_update_id: String(r.body.presence_last_update_id) });
    expect(Object.keys(d.body.presences).sort()).toEqual(['10', '13']);
  });

  it('carries the presence settings the old server behaves with, named as added (W2)', async () => {
    await setup(era);
    const forms: Array<Record<string, string>> = [
      { slim_presence: 'true', fetch_event_types: '["presence"]' },
      { fetch_event_types: '["presence"]' },
    ];
    for (const form of forms) {
      const r = await register(10, form);
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({ server_presence_ping_interval_seconds: 60, server_presence_offline_threshold_seconds: 140 });
      const added = String(r.headers['x-zulip-compat-backfilled']).split(',');
      expect(added).toEqual(expect.arrayContaining(['server_presence_ping_interval_seconds', 'server_presence_offline_threshold_seconds']));
    }
  });

  it('keeps the legacy format when slim_presence is not asked, adding the id', async () => {
    await setup(era);
    const expected = fake.legacyPresence();
    const r = await register(10, {});
    expect(r.body.presences).toEqual(expected);
    expect(Number.isInteger(r.body.presence_last_update_id)).toBe(true);
  });

  it('passes a register without presence on byte for byte', async () => {
    await setup(era);
    // Nothing the shim fills either (V4): no realm_user, no user_settings.
    const form = { fetch_event_types: '["message"]', event_types: '["message"]' };
    const viaShim = await register(10, form);
    const direct = await request(fake.url).post('/api/v1/register').set('Authorization', fake.auth(10)).type('form').send(form);
    // Queue ids differ per call; everything else is the same bytes.
    const strip = (t: string) => t.replace(/"queue_id":"[^"]+"/, '');
    expect(strip(viaShim.text)).toBe(strip(direct.text));
    expect(viaShim.body).not.toHaveProperty('presence_last_update_id');
  });
});

describe('register details', () => {
  it('adds server_timestamp from the Date header where an old upstream omits it (P6, P10)', async () => {
    await setup('4.0');
    const r = await register(10, { slim_presence: 'true' });
    expect(r.body.server_timestamp).toBeGreaterThan(1_600_000_000);
  });

  it('passes upstream errors through unchanged (E1)', async () => {
    await setup('2.1');
    const r = await request(shim.url).post('/api/v1/register').set('Authorization', 'Basic eDp5').type('form').send({});
    expect(r.status).toBe(401);
    expect(r.body).toEqual({ result: 'error', msg: 'Invalid API key' });
  });

  it('leaves a 9.0 register untouched', async () => {
    await setup('9.0');
    const r = await register(10, { slim_presence: 'true' });
    expect(r.body.presence_last_update_id).toBeLessThan(1000);
  });

  // The time a large register costs is bench B7's (bench/b7.ts); this checks what it answers.
  it('converts a 10k-user register answer in full: every user by id, as the legacy entries say', async () => {
    fake = await startFake({ era: '2.1', users: 10_000 });
    // Reports that differ from user to user: active, idle, at different times.
    for (const [i, u] of fake.humans().entries()) {
      if (i % 97 === 0) fake.advance(7);
      fake.report(u.user_id, i % 3 === 0 ? 'idle' : 'active');
    }
    shim = await startShim(fake.url, { presence: { coalesceMs: 0 } });
    const form = { slim_presence: 'true' };
    const direct = await request(fake.url).post('/api/v1/register').set('Authorization', fake.auth(10)).type('form').send(form);
    const viaShim = await register(10, form);
    expect(viaShim.status).toBe(200);
    const byEmail = new Map(fake.users.map((u) => [u.email, u.user_id]));
    const dateJoined = new Map(fake.users.map((u) => [u.user_id, Math.floor(Date.parse(u.date_joined) / 1000)]));
    const expected = toModern('legacy', direct.body.presences, { idOf: (e) => byEmail.get(e), dateJoinedOf: (id) => dateJoined.get(id) });
    expect(expected.unknownEmails).toEqual([]);
    expect(expected.presences.size).toBe(fake.humans().length);
    expect(viaShim.body.presences).toEqual(Object.fromEntries([...expected.presences].map(([id, p]) => [String(id), p])));
    expect(Number.isSafeInteger(viaShim.body.presence_last_update_id)).toBe(true);
  }, 60_000);

  it('passes an answer above the buffer limit on untouched', async () => {
    fake = await startFake({ era: '2.1', users: 200 });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    shim = await startShim(fake.url, { upstream: { maxResponseBytes: 4096 } });
    const { port } = new URL(shim.url);
    const text = await new Promise<string>((resolve, reject) => {
      const req = http.request(
        {
          host: '127.0.0.1',
          port,
          path: '/api/v1/register',
          method: 'POST',
          headers: { authorization: fake.auth(10), 'content-type': 'application/x-www-form-urlencoded' },
        },
        (res) => {
          let t = '';
          res.on('data', (d) => (t += d));
          res.on('end', () => resolve(t));
        },
      );
      req.on('error', reject);
      req.end('slim_presence=true');
    });
    const body = JSON.parse(text);
    expect(Object.keys(body.presences)[0]).toMatch(/@/);
    expect(body).not.toHaveProperty('presence_last_update_id');
  });
});

describe('register presence_history_limit_days (P12)', () => {
  it.each(['2.1', '7.0'] as const)('on %s: 0 returns no users; N leaves out users idle longer than N days', async (era) => {
    await setup(era);
    fake.advance(5 * 86_400);
    fake.report(10, 'active');
    for (const slim of ['true', 'false']) {
      const none = await register(10, { slim_presence: slim, presence_history_limit_days: '0' });
      expect(none.status).toBe(200);
      expect(none.body.presences).toEqual({});
      expect(none.body.presence_last_update_id).toBe(-1);
      const recent = await register(10, { slim_presence: slim, presence_history_limit_days: '2' });
      const shown = Object.keys(recent.body.presences);
      expect(shown).toEqual([slim === 'true' ? '10' : fake.user(10).email]);
      expect(recent.body.presence_last_update_id).toBeGreaterThan(0);
      const all = await register(10, { slim_presence: slim, presence_history_limit_days: '30' });
      expect(Object.keys(all.body.presences)).toHaveLength(fake.humans().length);
    }
  });

  it('rejects a bad value before the upstream call, in the modern server’s words (E3)', async () => {
    await setup('4.0');
    await register(10, {}); // the feature level, known from here on
    fake.resetStats();
    const r = await register(10, { presence_history_limit_days: '1.5' });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ result: 'error', msg: 'presence_history_limit_days is not an integer', code: 'BAD_REQUEST' });
    expect(fake.stats.register).toBe(0);
  });
});

describe.each(['7.0', '8.0'] as const)('a legacy register answer on %s (P4)', (era) => {
  it('carries a usable id alongside its users, never -1, on a fresh shim', async () => {
    await setup(era);
    const r = await register(10, {});
    expect(Object.keys(r.body.presences).length).toBe(fake.humans().length);
    const id = r.body.presence_last_update_id as number;
    expect(Number.isSafeInteger(id) && id > 0).toBe(true);
    // Continuing from it is safe: full data (it vouches for nothing the client lacks) or a delta.
    const next = await poll(10, { status: 'active', last_update_id: String(id) });
    expect(next.body.presence_last_update_id).toBeGreaterThanOrEqual(id);
    expect(Object.keys(next.body.presences)).toHaveLength(fake.humans().length);
  });
});

it('leaves a 9.0 register untouched, parameters the shim would check included (X7)', async () => {
  await setup('9.0');
  const r = await register(10, { slim_presence: 'true', presence_history_limit_days: '1e3' });
  expect(r.status).toBe(200);
  expect(new URLSearchParams(fake.seen.at(-1)!.body.toString()).get('presence_history_limit_days')).toBe('1e3');
});

describe.each(['5.0', '7.0', '8.0'] as const)('a logged-out visitor’s register on a web-public %s realm (P3, P7)', (era) => {
  const full = (user: number) => poll(user, { status: 'active', slim_presence: 'true', last_update_id: '-1' });
  const spectator = (form: Record<string, string>) => request(shim.url).post('/json/register').type('form').send(form);

  it('is answered as Zulip answers a spectator, and empties nobody else’s presence', async () => {
    fake = await startFake({ era, users: 6, spectators: true });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    // A window longer than the test: every poll below is answered from the first one's snapshot.
    shim = await startShim(fake.url, { presence: { coalesceMs: 60_000 } });
    const everyone = fake
      .humans()
      .map((u) => String(u.user_id))
      .sort();
    const [first, second] = fake.humans().map((u) => u.user_id);
    expect(Object.keys((await full(first!)).body.presences).sort()).toEqual(everyone);

    const forms: Array<Record<string, string>> = [
      { fetch_event_types: '["presence"]', slim_presence: 'true' },
      { fetch_event_types: '["presence"]' },
    ];
    for (const form of forms) {
      const r = await spectator(form);
      expect(r.status).toBe(200);
      // As a 9.0+ server answers a spectator: no presence of anyone, and no id to continue from.
      expect(r.body.queue_id).toBeNull();
      expect(r.body.presences).toEqual({});
      expect(r.body).not.toHaveProperty('presence_last_update_id');
      // W2: the presence settings, as a modern server sends a visitor too.
      expect(r.body).toMatchObject({ server_presence_ping_interval_seconds: 60, server_presence_offline_threshold_seconds: 140 });
    }
    // Nobody's view of the realm is the visitor's: full polls still hold every user, also once a
    // caller's own report (its second poll's) has moved the ledger past the snapshot.
    fake.advance(10);
    for (const user of [first!, first!, second!]) {
      const after = await full(user);
      expect(after.status).toBe(200);
      expect(Object.keys(after.body.presences).sort()).toEqual(everyone);
    }
  });
});
