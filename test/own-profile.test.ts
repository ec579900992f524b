import { defaultParsePool } from '../src/parse/parse-worker.js';
import { testConfig } from './support/shim.js';
import request from 'supertest';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { UNKNOWN_DATE_JOINED } from '../src/changes/fl010-avatar-guest-active-timezone-joined.js';
import { UpstreamClient } from '../src/upstream/client.js';
import { realmOf } from '../src/upstream/realm.js';
import { UserDirectory } from '../src/upstream/user-directory.js';
import { createLogger } from '../src/observability/logger.js';
import { createMetrics } from '../src/observability/metrics.js';
import type { CacheBackend } from '../src/cache/shared-cache.js';
import { failing, FakeZulip, OLD_ERAS, startFake, type Era, type FakeUser } from './support/fake-zulip.js';
import { compileSchema, expectValid } from './support/schema.js';
import { modernUserFields } from './support/modern-user.js';
import { startShim, type RunningShim } from './support/shim.js';
import { memoryStore } from './support/budgets.js';

/** The default budgets of the user directory, from the configuration. */
const { userDirectoriesBytes: maxBytes, largeAnswerBytes: maxAnswerBytes } = testConfig('http://127.0.0.1:1').memory;
const DIRECTORY_BUDGETS = { maxBytes, maxAnswerBytes };

const validateOwnUser = compileSchema('own-user.schema.json');
const expectModern = (body: unknown) => expectValid(validateOwnUser, body);

const ERAS = OLD_ERAS;
const OWNER = 10;
const ADMIN_AND_BILLING_ADMIN = 11;
const MODERATOR = 12;
const MEMBER = 13;
const GUEST = 14;
const BOT = 16;
const ACCOUNTS = [OWNER, ADMIN_AND_BILLING_ADMIN, MODERATOR, MEMBER, GUEST, BOT];

/** What a modern server would answer for this user of this realm, from the fake's own records. */
function modernProfile(fake: FakeZulip, u: FakeUser): Record<string, unknown> {
  return {
    result: 'success',
    msg: '',
    ...modernUserFields(fake, u),
    delivery_email: u.delivery_email,
    is_active: true,
    max_message_id: 30,
    // V5: a bot's own profile names its type and owner, as its row in the user list does.
    ...(u.is_bot ? { bot_type: u.bot_type, bot_owner_id: u.bot_owner_id ?? null } : { profile_data: u.profile_data }),
  };
}

/** The fields the shim must add for this era (U4). */
function backfilledFor(fake: FakeZulip, u: FakeUser): string[] {
  const fl = fake.featureLevel;
  const out: string[] = [];
  if (fl < 8) out.push('is_owner');
  if (fl < 10 && u.is_bot) out.push('bot_owner_id', 'bot_type'); // V5: 2.1's hand-built own profile
  if (fl < 10) out.push('avatar_version', 'is_guest', 'is_active', 'timezone', 'date_joined');
  if (fl < 59) out.push('role');
  if (fl < 73) out.push('is_billing_admin');
  const upstreamShowsIt = fl >= 156 || (fake.emailAddressVisibility === 'admins' && fl >= 10 && u.role <= 200);
  if (!upstreamShowsIt) out.push('delivery_email');
  return out;
}

function totalRequests(fake: FakeZulip): number {
  return [...fake.stats.requests.values()].reduce((a, b) => a + b, 0);
}

async function direct(fake: FakeZulip, userId: number) {
  return request(fake.url).get('/api/v1/users/me').set('Authorization', fake.auth(userId));
}

describe('the own-user schema', () => {
  it('checks formats, not only types', () => {
    const realm = new FakeZulip({ era: '8.0' }); // not started: only its records are used
    const valid = modernProfile(realm, realm.user(MEMBER));
    expect(validateOwnUser(valid)).toBe(true);
    expect(validateOwnUser({ ...valid, date_joined: '2019-13-45T99:00:00+00:00' })).toBe(false);
    expect(validateOwnUser({ ...valid, delivery_email: 'not an address' })).toBe(false);
    expect(validateOwnUser({ ...valid, role: 300, is_admin: true })).toBe(false);
    expect(validateOwnUser({ ...valid, extra_field: 1 })).toBe(false);
  });
});

/** Cold/warm upstream calls per era, printed at the end for the report. */
const costs: Record<string, { cold: number; warm: number; secondUserCold: number }> = {};

describe.each(ERAS)('GET /api/v1/users/me on a %s upstream', (era) => {
  let fake: FakeZulip;
  let shim: RunningShim;

  beforeAll(async () => {
    fake = await startFake({ era });
    shim = await startShim(fake.url);
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });
  afterEach(() => {
    fake.override = undefined;
  });

  it('costs few upstream calls cold and exactly one warm', async () => {
    const own = await startShim(fake.url);
    try {
      fake.resetStats();
      expect((await request(own.url).get('/api/v1/users/me').set('Authorization', fake.auth(MEMBER))).status).toBe(200);
      const cold = totalRequests(fake);
      fake.resetStats();
      expect((await request(own.url).get('/api/v1/users/me').set('Authorization', fake.auth(MEMBER))).status).toBe(200);
      const warm = totalRequests(fake);
      fake.resetStats();
      expect((await request(own.url).get('/api/v1/users/me').set('Authorization', fake.auth(GUEST))).status).toBe(200);
      const secondUserCold = totalRequests(fake);
      costs[era] = { cold, warm, secondUserCold };
      const fl = fake.featureLevel;
      // server_settings + users/me, + GET /users below FL 10, + register and DELETE /events below 6.0.
      expect(cold).toBe(2 + (fl < 10 ? 1 : 0) + (fl < 156 ? 2 : 0));
      expect(warm).toBe(1);
      // The realm's user list is shared; the delivery email is per user.
      expect(secondUserCold).toBe(1 + (fl < 156 ? 2 : 0));
      expect(fake.openQueues.size).toBe(0);
    } finally {
      await own.close();
    }
  });

  it.each(ACCOUNTS)('gives user %i every modern field with its true value, and keeps the upstream’s (U1-U4)', async (id) => {
    const u = fake.user(id);
    const res = await request(shim.url).get('/api/v1/users/me').set('Authorization', fake.auth(id));
    expect(res.status).toBe(200);
    expectModern(res.body);
    const upstream = (await direct(fake, id)).body as Record<string, unknown>;
    const modern = modernProfile(fake, u);
    // U1: the upstream's own fields as sent (pointer, client_id, short_name on 2.1, bot fields).
    expect(res.body).toEqual({ ...modern, ...upstream });
    for (const [k, v] of Object.entries(modern)) expect([k, res.body[k]]).toEqual([k, v]);
    const added = backfilledFor(fake, u);
    expect(
      Object.keys(res.body)
        .filter((k) => !(k in upstream))
        .sort(),
    ).toEqual([...added].sort());
    if (added.length) expect(res.headers['x-zulip-compat-backfilled']!.split(',').sort()).toEqual([...added].sort());
    else expect(res.headers['x-zulip-compat-backfilled']).toBeUndefined();
    expect(res.headers['x-zulip-compat-fallback']).toBeUndefined();
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(fake.openQueues.size).toBe(0);
  });

  it('does not repeat lookups for repeated calls', async () => {
    await request(shim.url).get('/api/v1/users/me').set('Authorization', fake.auth(OWNER));
    fake.resetStats();
    for (let i = 0; i < 3; i++) {
      const res = await request(shim.url).get('/api/v1/users/me').set('Authorization', fake.auth(OWNER));
      expect(res.status).toBe(200);
    }
    expect(fake.stats.usersList).toBe(0);
    expect(fake.stats.register).toBe(0);
    expect(totalRequests(fake)).toBe(3);
  });

  it('passes an invalid key’s 401 through untouched (E1)', async () => {
    const auth = `Basic ${Buffer.from(`${fake.user(MEMBER).email}:wrong`).toString('base64')}`;
    const upstream = await request(fake.url).get('/api/v1/users/me').set('Authorization', auth);
    fake.resetStats();
    const res = await request(shim.url).get('/api/v1/users/me').set('Authorization', auth);
    expect(res.status).toBe(401);
    expect(res.text).toBe(upstream.text);
    expect(res.headers['www-authenticate']).toBe('Basic realm="zulip"');
    expect(res.headers['x-zulip-compat-backfilled']).toBeUndefined();
    // No lookups for a caller the upstream did not accept.
    expect(fake.stats.usersList + fake.stats.register).toBe(0);
  });

  it('lists query parameters in ignored_parameters_unsupported (U5)', async () => {
    const res = await request(shim.url).get('/api/v1/users/me?zeta=1&alpha=2&zeta=3').set('Authorization', fake.auth(MEMBER));
    expect(res.status).toBe(200);
    expectModern(res.body);
    expect(res.body.ignored_parameters_unsupported).toEqual(['alpha', 'zeta']);
    expect(res.headers['x-zulip-compat-backfilled']!.split(',')).toContain('ignored_parameters_unsupported');
    expect(fake.seen.at(-1)!.url).toBe('/api/v1/users/me?zeta=1&alpha=2&zeta=3');
  });

  it('keeps the upstream’s bytes when nothing is missing', async () => {
    if (fake.featureLevel < 156) return;
    const upstream = await direct(fake, MEMBER);
    const res = await request(shim.url).get('/api/v1/users/me').set('Authorization', fake.auth(MEMBER));
    expect(res.text).toBe(upstream.text);
    expect(res.headers['x-zulip-compat-backfilled']).toBeUndefined();
  });
});

describe('own profile lookups', () => {
  let fake: FakeZulip;
  let shim: RunningShim;

  async function fresh(era: Era, over: Parameters<typeof startFake>[0] = { era }) {
    await shim?.close();
    await fake?.stop();
    fake = await startFake(over);
    shim = await startShim(fake.url);
  }
  const me = (id: number, path = '/api/v1/users/me') => request(shim.url).get(path).set('Authorization', fake.auth(id));

  afterAll(async () => {
    await shim?.close();
    await fake?.stop();
  });

  it('answers 200 with the documented rules when GET /users fails, and retries on the next call (E4)', async () => {
    await fresh('2.1');
    fake.override = failing('GET', '/api/v1/users');
    const res = await me(MEMBER);
    expect(res.status).toBe(200);
    expectModern(res.body);
    const u = fake.user(MEMBER);
    expect(res.body).toMatchObject({
      is_guest: false,
      is_active: true,
      timezone: '',
      date_joined: UNKNOWN_DATE_JOINED,
      avatar_version: u.avatar_version, // from the avatar URL, needs no lookup
      delivery_email: u.delivery_email,
      role: 400,
    });
    expect(res.headers['x-zulip-compat-fallback']).toBe('is_guest,timezone,date_joined');
    expect(shim.logs.some((l) => l.includes('user list lookup failed'))).toBe(true);
    // The failure is not cached: the next call looks again and gets the true values.
    fake.override = undefined;
    const again = await me(MEMBER);
    expect(again.body).toMatchObject({ timezone: u.timezone, date_joined: u.date_joined });
    expect(again.headers['x-zulip-compat-fallback']).toBeUndefined();
  });

  it('falls back to email when register fails, leaving no queue (E4)', async () => {
    await fresh('3.0');
    fake.override = failing('POST', '/api/v1/register');
    const res = await me(MEMBER);
    expect(res.status).toBe(200);
    expectModern(res.body);
    expect(res.body.delivery_email).toBe(fake.user(MEMBER).email);
    expect(res.headers['x-zulip-compat-fallback']).toBe('delivery_email');
    expect(fake.openQueues.size).toBe(0);
  });

  it('deletes the queue when the register answer is not usable', async () => {
    await fresh('5.0');
    fake.override = (req, res) => {
      if (req.method !== 'POST' || req.url !== '/api/v1/register') return false;
      fake.openQueues.add('q-broken');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"result":"success","msg":"","queue_id":"q-broken","realm_users":[');
      return true;
    };
    const res = await me(MEMBER);
    expect(res.status).toBe(200);
    expect(res.body.delivery_email).toBe(fake.user(MEMBER).email);
    expect(fake.openQueues.size).toBe(0);
    expect(fake.stats.queuesDeleted).toBe(1);
  });

  it('does not use a register answer for another user', async () => {
    await fresh('4.0');
    fake.override = (req, res) => {
      if (req.method !== 'POST' || req.url !== '/api/v1/register') return false;
      fake.openQueues.add('q-other');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ result: 'success', msg: '', queue_id: 'q-other', user_id: 999, delivery_email: 'someone@else.org' }));
      return true;
    };
    const res = await me(MEMBER);
    expect(res.body.delivery_email).toBe(fake.user(MEMBER).email);
    expect(fake.openQueues.size).toBe(0);
  });

  it('uses the delivery_email a 3.0-5.x upstream shows an admin, without registering (U1)', async () => {
    for (const era of ['3.0', '5.0'] as const) {
      await fresh(era, { era, emailAddressVisibility: 'admins' });
      const admin = await me(ADMIN_AND_BILLING_ADMIN);
      expect(admin.body.delivery_email).toBe(fake.user(ADMIN_AND_BILLING_ADMIN).delivery_email);
      expect(admin.headers['x-zulip-compat-backfilled'] ?? '').not.toContain('delivery_email');
      expect(fake.stats.register).toBe(0);
      const member = await me(MEMBER);
      expect(member.body.delivery_email).toBe(fake.user(MEMBER).delivery_email);
      expect(fake.stats.register).toBe(1);
    }
  });

  it('makes one lookup for many concurrent cold calls (single flight)', async () => {
    await fresh('2.1');
    const answers = await Promise.all([...Array(8).keys()].map(() => me(MEMBER)));
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(a.body.timezone).toBe(fake.user(MEMBER).timezone);
    }
    expect(fake.stats.usersList).toBe(1);
    expect(fake.stats.register).toBe(1);
    expect(fake.openQueues.size).toBe(0);
  });

  it('counts lookup hits and misses', async () => {
    await fresh('2.1');
    await me(MEMBER);
    await me(MEMBER);
    const text = (await request(shim.url).get('/metrics')).text;
    const count = (cache: string, result: string) =>
      Number(new RegExp(`zulip_compat_shim_lookup_cache_total\\{cache="${cache}",result="${result}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
    expect([count('user_directory', 'miss'), count('user_directory', 'hit')]).toEqual([1, 1]);
    expect([count('own_profile', 'miss'), count('own_profile', 'hit')]).toEqual([1, 1]);
  });

  it('still backfills when server_settings fails (E4)', async () => {
    await fresh('2.1');
    fake.override = failing('GET', '/api/v1/server_settings');
    const res = await me(GUEST);
    expect(res.status).toBe(200);
    expectModern(res.body);
    expect(res.body).toMatchObject({ is_guest: true, role: 600, is_owner: false });
  });

  it('leaves a complete answer alone when server_settings fails', async () => {
    await fresh('8.0');
    fake.override = failing('GET', '/api/v1/server_settings');
    const upstream = await direct(fake, OWNER);
    const res = await me(OWNER);
    expect(res.text).toBe(upstream.text);
    expect(res.headers['x-zulip-compat-backfilled']).toBeUndefined();
  });

  it('answers a 2xx that is not JSON with UPSTREAM_BAD_RESPONSE (E2)', async () => {
    await fresh('2.1');
    fake.override = (req, res) => {
      if (req.url !== '/api/v1/users/me') return false;
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end('<html>');
      return true;
    };
    const res = await me(MEMBER);
    expect(res.status).toBe(502);
    expect(res.body).toMatchObject({ result: 'error', code: 'UPSTREAM_BAD_RESPONSE' });
  });

  it('finds a user who joined after the realm list was read', async () => {
    await fresh('2.1');
    await me(MEMBER);
    const ctx = shim.shim.context;
    ctx.users = new UserDirectory(ctx.client, ctx.log, ctx.metrics, {
      ...ctx.config.lookups,
      minRefreshMs: 0,
      parser: defaultParsePool(),
      ...DIRECTORY_BUDGETS,
    });
    await me(MEMBER);
    const newcomer: FakeUser = {
      ...fake.user(MEMBER),
      user_id: 99,
      email: 'new@zulip.example.com',
      api_key: 'newkeysecret',
      timezone: 'Asia/Tokyo',
    };
    fake.users.push(newcomer);
    const res = await me(99);
    expect(res.body).toMatchObject({ user_id: 99, timezone: 'Asia/Tokyo' });
    expect(res.headers['x-zulip-compat-fallback']).toBeUndefined();
  });

  it('never logs a credential (P13)', async () => {
    await fresh('2.1');
    fake.override = failing('GET', '/api/v1/users');
    await me(MEMBER);
    const text = shim.logs.join('');
    const u = fake.user(MEMBER);
    expect(text).not.toContain(u.api_key);
    expect(text).not.toContain(fake.auth(u).slice(6));
  });
});

describe('the user directory', () => {
  let fake: FakeZulip;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
  });
  afterAll(async () => {
    await fake.stop();
  });

  it('reads a realm’s list once, re-reads it on refresh only when old enough', async () => {
    const client = new UpstreamClient({ target: fake.url, timeoutMs: 5000, maxSockets: 4, insecureTls: false, maxResponseBytes: 1 << 20 });
    const realm = realmOf(fake.url, { host: 'chat.example.com' });
    const headers = { authorization: fake.auth(MEMBER) };
    const log = createLogger('silent');
    try {
      const slow = new UserDirectory(client, log, createMetrics(), {
        ttlMs: 60_000,
        maxEntries: 10,
        minRefreshMs: 60_000,
        parser: defaultParsePool(),
        ...DIRECTORY_BUDGETS,
      });
      const dir = await slow.get(realm, headers);
      expect(dir.member(dir.idOf(fake.user(GUEST).email)!)).toMatchObject({ user_id: GUEST, is_guest: true });
      expect(dir.member(BOT)).toMatchObject({ is_bot: true });
      await slow.get(realm, headers);
      await slow.refresh(realm, headers);
      expect(fake.stats.usersList).toBe(1);
      const eager = new UserDirectory(client, log, createMetrics(), {
        ttlMs: 60_000,
        maxEntries: 10,
        minRefreshMs: 0,
        parser: defaultParsePool(),
        ...DIRECTORY_BUDGETS,
      });
      await eager.get(realm, headers);
      await eager.refresh(realm, headers);
      expect(fake.stats.usersList).toBe(3);
    } finally {
      await client.destroy();
    }
  });
});

afterAll(() => {
  // The numbers behind the report: upstream calls per GET /users/me, by era.
  console.log(`own-profile upstream calls: ${JSON.stringify(costs)}`);
});

describe('lookup caches shared by replicas (S1)', () => {
  it('lets a second replica answer a cold own-profile call from what the first looked up', async () => {
    const fake = await startFake({ era: '2.1' });
    const shared = new Map<string, { json: string; expires: number }>();
    const backend: CacheBackend = {
      get: async (key) => {
        const e = shared.get(key);
        return e && e.expires > Date.now() ? { json: e.json, ttlMs: e.expires - Date.now() } : undefined;
      },
      set: async (key, json, ttlMs) => void shared.set(key, { json, expires: Date.now() + ttlMs }),
      delete: async (key) => void shared.delete(key),
    };
    const replica = () => {
      const store = memoryStore(10);
      Object.defineProperty(store, 'cacheBackend', { value: backend });
      return startShim(fake.url, {}, { store });
    };
    const [a, b] = [await replica(), await replica()];
    try {
      // Replicas behind one load balancer see the same Host, hence the same realm.
      const me = (url: string) =>
        request(url).get('/api/v1/users/me').set('Host', 'chat.example.com').set('Authorization', fake.auth(MEMBER));
      const first = await me(a.url);
      fake.resetStats();
      const second = await me(b.url);
      expect(second.body).toEqual(first.body);
      expect(fake.stats.usersList + fake.stats.register).toBe(0);
      // Keys name the realm and user id, never a credential (P13).
      for (const key of shared.keys()) expect(key).not.toMatch(/Basic|secret/);
      expect([...shared.keys()].map((k) => k.split(':')[0]).sort()).toEqual(['own_profile', 'user_directory']);
    } finally {
      await a.close();
      await b.close();
      await fake.stop();
    }
  });
});
