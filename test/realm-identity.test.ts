import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { realmUrlOf } from '../src/upstream/feature-level.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { realmKeyOf } from './support/realm-key.js';
import { describeRedis, REDIS_URL, suiteKeyPrefix } from './support/redis.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * X12: one realm, one state, whatever the Host. A one-realm Zulip server answers any Host for
 * its realm; the shim keys realm state by the realm the upstream names in server_settings, so
 * aliases share one ledger and one fetch stream, and a made-up Host costs one cached call.
 */

let fake: FakeZulip;
let shim: RunningShim;
afterEach(async () => {
  await shim?.close();
  await fake?.stop();
});

const poll = (host: string, user: number, form: Record<string, string>) =>
  request(shim.url).post('/api/v1/users/me/presence').set('Host', host).set('Authorization', fake.auth(user)).type('form').send(form);

describe('realm identity (X12)', () => {
  it('two Hosts of one realm share its ledger: an id from one is continued from through the other', async () => {
    fake = await startFake({ era: '2.1', oneRealm: true });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    shim = await startShim(fake.url, { presence: { coalesceMs: 60_000 } });
    const first = await poll('chat.example.com', 11, { status: 'active', last_update_id: '-1' });
    const again = await poll('CHAT.example.com:443', 11, { status: 'active', last_update_id: String(first.body.presence_last_update_id) });
    expect(again.status).toBe(200);
    // A delta (the alias's ledger is the realm's), from the one snapshot of the window.
    expect(Object.keys(again.body.presences).length).toBeLessThan(fake.humans().length);
    expect(fake.stats.presenceFull).toBe(1);
  });

  it('a flood of made-up Hosts costs one server_settings call each, not a realm’s worth of fetches', async () => {
    fake = await startFake({ era: '2.1', oneRealm: true });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    shim = await startShim(fake.url, { presence: { coalesceMs: 60_000 } });
    const hosts = Array.from({ length: 40 }, (_, i) => `made-up-${i}.example.net`);
    for (const host of hosts) {
      const r = await poll(host, 12, { status: 'active', last_update_id: '-1' });
      expect(r.status).toBe(200);
    }
    for (const host of hosts) await poll(host, 12, { status: 'active', last_update_id: '-1' });
    expect(fake.stats.requests.get('GET /api/v1/server_settings')).toBe(hosts.length);
    expect(fake.stats.presenceFull).toBe(1);
    expect(fake.stats.usersList).toBe(1);
  });

  it.each([
    [{ realm_uri: 'https://Chat.Example.com/' }, 'https://chat.example.com'],
    [{ realm_url: 'https://a.example.com', realm_uri: 'https://old.example.com' }, 'https://a.example.com'],
    [{}, undefined],
    [{ realm_uri: '' }, undefined],
  ])('the realm a server_settings answer names: %j → %s', (settings, expected) => {
    expect(realmUrlOf(settings)).toBe(expected);
  });
});

describe('new realms at a bounded rate (X12)', () => {
  it('past presence.newRealmsPerMinute, a new realm gets a 503 with Retry-After and costs no realm fetch; known realms go on', async () => {
    fake = await startFake({ era: '2.1' }); // a realm per Host
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    shim = await startShim(fake.url, { presence: { coalesceMs: 60_000, newRealmsPerMinute: 3 } });
    for (const host of ['a.example.com', 'b.example.com', 'c.example.com']) {
      expect((await poll(host, 11, { status: 'active', last_update_id: '-1' })).status).toBe(200);
    }
    const fetchesBefore = fake.stats.presenceFull;
    const refused = await poll('d.example.com', 11, { status: 'active', last_update_id: '-1' });
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({ result: 'error', code: 'UPSTREAM_UNAVAILABLE' });
    expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(15);
    expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(20);
    const profile = await request(shim.url).get('/api/v1/users/me').set('Host', 'e.example.com').set('Authorization', fake.auth(11));
    expect(profile.status).toBe(503);
    expect(profile.headers['retry-after']).toBeDefined();
    const register = await request(shim.url)
      .post('/api/v1/register')
      .set('Host', 'f.example.com')
      .set('Authorization', fake.auth(11))
      .type('form')
      .send({});
    expect(register.status).toBe(503);
    expect(fake.stats.presenceFull).toBe(fetchesBefore);
    // A realm already taken on never waits.
    expect((await poll('b.example.com', 11, { status: 'active', last_update_id: '-1' })).status).toBe(200);
    const metrics = await request(shim.url).get('/metrics');
    expect(metrics.text).toMatch(/zulip_compat_shim_new_realms_refused_total 3/);
  });

  it('takes no token for a realm on the modern presence API (9.0): the shim keeps no state for it', async () => {
    fake = await startFake({ era: '9.0' });
    shim = await startShim(fake.url, { presence: { newRealmsPerMinute: 1 } });
    for (const host of ['a.example.com', 'b.example.com', 'c.example.com']) {
      expect((await poll(host, 11, { status: 'active', last_update_id: '-1' })).status).toBe(200);
    }
    expect((await request(shim.url).get('/metrics')).text).toMatch(/zulip_compat_shim_new_realms_refused_total 0/);
  });
});

describe('new realms are taken on only for callers the upstream accepts (X12)', () => {
  const refusedCount = async () => Number(/new_realms_refused_total (\d+)/.exec((await request(shim.url).get('/metrics')).text)?.[1]);

  it('unauthenticated requests for 1,000 made-up Hosts take no token and keep nothing: an authenticated new realm is admitted at once', async () => {
    fake = await startFake({ era: '2.1' }); // a realm per Host
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    shim = await startShim(fake.url, { presence: { coalesceMs: 60_000 } }); // the default rate, 120 a minute
    const flood = (i: number) => {
      const host = `a${i}.realm.test`;
      if (i % 3 === 0) return request(shim.url).get('/api/v1/users/me').set('Host', host);
      if (i % 3 === 1) return request(shim.url).post('/api/v1/register').set('Host', host).type('form').send({});
      return request(shim.url)
        .post('/api/v1/users/me/presence')
        .set('Host', host)
        .type('form')
        .send({ status: 'active', last_update_id: '-1' });
    };
    for (let from = 0; from < 1_000; from += 25) {
      const answers = await Promise.all(Array.from({ length: 25 }, (_, i) => flood(from + i)));
      for (const r of answers) {
        // The upstream's own refusal (E1), not the shim's 503.
        expect(r.status).toBe(401);
        expect(r.body).toMatchObject({ result: 'error', msg: 'Missing authorization header for basic auth' });
      }
    }
    expect(fake.stats.presenceFull + fake.stats.presencePing).toBe(0);
    expect(fake.stats.usersList).toBe(0);
    const { store } = shim.shim.context;
    expect(store.peek(await realmKeyOf(shim, fake.url, 'a2.realm.test'))).toBeUndefined();
    expect(await store.isAdmitted(await realmKeyOf(shim, fake.url, 'a2.realm.test'))).toBe(false);

    const real = await poll('real.realm.test', 11, { status: 'active', last_update_id: '-1' });
    expect(real.status).toBe(200);
    expect(Object.keys(real.body.presences).length).toBe(fake.humans().length);
    expect(await store.isAdmitted(await realmKeyOf(shim, fake.url, 'real.realm.test'))).toBe(true);
    const profile = await request(shim.url).get('/api/v1/users/me').set('Host', 'profile.realm.test').set('Authorization', fake.auth(11));
    expect(profile.status).toBe(200);
    const register = await request(shim.url)
      .post('/api/v1/register')
      .set('Host', 'register.realm.test')
      .set('Authorization', fake.auth(11))
      .type('form')
      .send({ slim_presence: 'true' });
    expect(register.status).toBe(200);
    expect(register.body.presence_last_update_id).toBeGreaterThan(0);
    expect(await refusedCount()).toBe(0);
  }, 60_000);

  it('a client address past its share gets the 503 while another address is admitted', async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url, { server: { trustProxy: ['127.0.0.1'] }, presence: { newRealmsPerAddressPerMinute: 2 } });
    const from = (address: string, host: string) =>
      request(shim.url)
        .post('/api/v1/users/me/presence')
        .set('Host', host)
        .set('X-Forwarded-For', address)
        .set('Authorization', fake.auth(11))
        .type('form')
        .send({ status: 'active', last_update_id: '-1' });
    for (const host of ['f1.realm.test', 'f2.realm.test']) expect((await from('198.51.100.7', host)).status).toBe(200);
    const past = await from('198.51.100.7', 'f3.realm.test');
    expect(past.status).toBe(503);
    expect(past.body).toMatchObject({ result: 'error', code: 'UPSTREAM_UNAVAILABLE' });
    expect(Number(past.headers['retry-after'])).toBe(30);
    expect((await from('203.0.113.10', 'other.realm.test')).status).toBe(200);
    // A realm already taken on never waits, whoever asks.
    expect((await from('198.51.100.7', 'other.realm.test')).status).toBe(200);
    expect(await refusedCount()).toBe(1);
  });

  it('an address a client writes itself is not believed: without a trusted proxy the peer is the client', async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url, { presence: { newRealmsPerAddressPerMinute: 1 } });
    const from = (address: string, host: string) =>
      request(shim.url).get('/api/v1/users/me').set('Host', host).set('X-Forwarded-For', address).set('Authorization', fake.auth(11));
    expect((await from('198.51.100.7', 'g1.realm.test')).status).toBe(200);
    expect((await from('203.0.113.10', 'g2.realm.test')).status).toBe(503);
  });

  it("a logged-out visitor's register on a new web-public realm is answered as Zulip answers it, and takes no token", async () => {
    fake = await startFake({ era: '5.0', spectators: true });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    shim = await startShim(fake.url, { presence: { newRealmsPerMinute: 1 } });
    for (const cookie of [undefined, 'csrftoken=abc']) {
      let visitor = request(shim.url).post('/json/register').set('Host', 'public.realm.test');
      if (cookie) visitor = visitor.set('Cookie', cookie);
      const r = await visitor.type('form').send({ fetch_event_types: '["presence"]', slim_presence: 'true' });
      expect(r.status).toBe(200);
      expect(r.body.queue_id).toBeNull();
      expect(r.body.presences).toEqual({});
      expect(r.body).toMatchObject({ server_presence_ping_interval_seconds: 60, server_presence_offline_threshold_seconds: 140 });
    }
    expect(await shim.shim.context.store.isAdmitted(await realmKeyOf(shim, fake.url, 'public.realm.test'))).toBe(false);
    // The one token is still there for the realm's first user.
    expect((await poll('public.realm.test', 11, { status: 'active', last_update_id: '-1' })).status).toBe(200);
  });
});

describeRedis('admitted realms in Redis (X12, S1)', () => {
  const prefix = suiteKeyPrefix();

  it('a restart (a new shim on the same store) does not forget the realms taken on', async () => {
    fake = await startFake({ era: '2.1' });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    const settings = { store: { redisUrl: REDIS_URL, keyPrefix: prefix }, presence: { newRealmsPerMinute: 1 } };
    shim = await startShim(fake.url, settings);
    expect((await poll('kept.realm.test', 11, { status: 'active', last_update_id: '-1' })).status).toBe(200);
    expect((await poll('second.realm.test', 11, { status: 'active', last_update_id: '-1' })).status).toBe(503);
    await shim.close();

    shim = await startShim(fake.url, settings);
    // Remembered: no token, so the new process's only one is left for a realm that is new to it.
    expect((await poll('kept.realm.test', 12, { status: 'active', last_update_id: '-1' })).status).toBe(200);
    expect((await poll('second.realm.test', 11, { status: 'active', last_update_id: '-1' })).status).toBe(200);
    expect((await poll('third.realm.test', 11, { status: 'active', last_update_id: '-1' })).status).toBe(503);
  });
});
