import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { realmUrlOf } from '../src/upstream/feature-level.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
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
