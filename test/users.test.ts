import request from 'supertest';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { failing, type FakeZulip, OLD_ERAS, startFake, type Era, type FakeUser } from './support/fake-zulip.js';
import { matchesSchema } from './support/schema.js';
import { modernUserFields } from './support/modern-user.js';
import { startShim, type RunningShim } from './support/shim.js';

/** V1–V4 through the fake upstream, era by era, for an administrator, a member and a guest. */

const expectUserBase = matchesSchema('user-base.schema.json');

const ERAS = OLD_ERAS;
const ADMIN = 11;
const MEMBER = 13;
const GUEST = 14;
const CALLERS = [ADMIN, MEMBER, GUEST];
const BOT = 16;

/** What a 9.x server answers for `u` to `viewer`, from the fake's own records (V1, V2). */
function modernUser(fake: FakeZulip, u: FakeUser, viewer: FakeUser): Record<string, unknown> {
  const seesAddress =
    fake.featureLevel >= 163 ||
    u.is_bot ||
    u.user_id === viewer.user_id ||
    (fake.emailAddressVisibility === 'admins' && viewer.role <= 200);
  const o: Record<string, unknown> = {
    ...modernUserFields(fake, u),
    is_active: u.is_active,
    delivery_email: seesAddress ? u.delivery_email : null,
  };
  if (u.is_bot) Object.assign(o, { bot_type: u.bot_type, bot_owner_id: u.bot_owner_id });
  if (u.is_bot && fake.featureLevel < 1) o.bot_owner = fake.user(u.bot_owner_id!).email; // U1: the legacy field stays
  return o;
}

describe.each(ERAS)('user objects on a %s upstream (V1–V4)', (era) => {
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

  describe.each(CALLERS)('to user %i', (callerId) => {
    it('GET /users: every member has every UserBase field with its true value, the upstream’s kept', async () => {
      const caller = fake.user(callerId);
      const upstream = await request(fake.url).get('/api/v1/users').set('Authorization', fake.auth(callerId));
      const res = await request(shim.url).get('/api/v1/users').set('Authorization', fake.auth(callerId));
      expect(res.status).toBe(200);
      expect(res.body.members).toHaveLength(fake.users.length);
      for (const [i, m] of (res.body.members as Record<string, unknown>[]).entries()) {
        expectUserBase(m);
        const u = fake.user(m.user_id as number);
        expect(m).toEqual(modernUser(fake, u, caller));
        expect(m).toMatchObject(upstream.body.members[i]); // U1
      }
      if (fake.featureLevel >= 163) {
        // Nothing to add from 7.0: the upstream's bytes (V4).
        expect(res.text).toBe(upstream.text);
        expect(res.headers['x-zulip-compat-backfilled']).toBeUndefined();
        return;
      }
      const added = res.headers['x-zulip-compat-backfilled']!.split(',');
      expect(added).toContain('delivery_email');
      if (fake.featureLevel < 8) expect(added).toContain('is_owner');
      if (fake.featureLevel < 1) expect(added).toContain('bot_owner_id');
      expect(res.headers['x-zulip-compat-fallback']).toBeUndefined();
    });

    it('GET /users/{user_id}, also where the upstream lacks it (2.1)', async () => {
      const caller = fake.user(callerId);
      for (const id of [MEMBER, BOT, callerId]) {
        const res = await request(shim.url).get(`/api/v1/users/${id}`).set('Authorization', fake.auth(callerId));
        expect(res.status).toBe(200);
        expect(res.body.result).toBe('success');
        expectUserBase(res.body.user);
        expect(res.body.user).toEqual(modernUser(fake, fake.user(id), caller));
      }
    });

    it('GET /users/{email}, also where the upstream lacks it (before 4.0)', async () => {
      const caller = fake.user(callerId);
      const u = fake.user(ADMIN);
      const res = await request(shim.url)
        .get(`/api/v1/users/${encodeURIComponent(u.email.toUpperCase())}`)
        .set('Authorization', fake.auth(callerId));
      expect(res.status).toBe(200);
      expectUserBase(res.body.user);
      expect(res.body.user).toEqual(modernUser(fake, u, caller));
    });
  });

  it('answers an unknown user as a modern server does', async () => {
    for (const path of ['/api/v1/users/999', '/api/v1/users/nobody%40example.com']) {
      const res = await request(shim.url).get(path).set('Authorization', fake.auth(MEMBER));
      expect(res.status).toBe(400);
      expect(res.text).toBe('{"result":"error","msg":"No such user","code":"BAD_REQUEST"}');
    }
  });

  it('has the upstream check the caller first: its refusal goes back untouched (E1)', async () => {
    const auth = `Basic ${Buffer.from(`${fake.user(MEMBER).email}:wrong`).toString('base64')}`;
    for (const path of ['/api/v1/users/12', '/api/v1/users/999', '/api/v1/users/user12%40zulip.example.com', '/api/v1/users']) {
      const direct = await request(fake.url).get('/api/v1/users/me').set('Authorization', auth);
      const res = await request(shim.url).get(path).set('Authorization', auth);
      expect(res.status).toBe(401);
      expect(res.text).toBe(direct.text);
      expect(res.headers['x-zulip-compat-backfilled']).toBeUndefined();
    }
  });

  it('serves the web app’s /json paths the same way (session cookie)', async () => {
    const caller = fake.user(MEMBER);
    const cookie = `sessionid=${caller.api_key}; csrftoken=tok`;
    const me = await request(shim.url).get('/json/users/me').set('Cookie', cookie);
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ user_id: MEMBER, delivery_email: caller.delivery_email, role: 400, is_owner: false });
    const list = await request(shim.url).get('/json/users').set('Cookie', cookie);
    expect(list.status).toBe(200);
    for (const m of list.body.members as unknown[]) expectUserBase(m);
    const one = await request(shim.url).get(`/json/users/${ADMIN}`).set('Cookie', cookie);
    expect(one.status).toBe(200);
    expect(one.body.user).toEqual(modernUser(fake, fake.user(ADMIN), caller));
  });

  it('register: realm_users and cross_realm_bots filled, user_settings built, own address kept (V1–V3)', async () => {
    const caller = fake.user(MEMBER);
    const res = await request(shim.url)
      .post('/api/v1/register')
      .set('Authorization', fake.auth(MEMBER))
      .type('form')
      .send({ fetch_event_types: '["realm_user","user_settings","update_display_settings","update_global_notifications"]' });
    expect(res.status).toBe(200);
    for (const m of res.body.realm_users as Record<string, unknown>[]) {
      expectUserBase(m);
      expect(m).toEqual(modernUser(fake, fake.user(m.user_id as number), caller));
    }
    const [bot] = res.body.cross_realm_bots as Record<string, unknown>[];
    expectUserBase(bot);
    expect(bot).toMatchObject({
      is_system_bot: true,
      bot_type: 1,
      bot_owner_id: null,
      role: 400,
      delivery_email: 'notification-bot@zulip.com',
    }); // V5
    expect(res.body.user_settings).toMatchObject({ twenty_four_hour_time: true, emojiset: 'google', presence_enabled: true });
    expect(res.body.twenty_four_hour_time).toBe(true); // V3: the top-level keys stay
    const added = (res.headers['x-zulip-compat-backfilled'] ?? '').split(',');
    expect(added.includes('user_settings')).toBe(fake.featureLevel < 89);
  });
});

describe('a realm that shows addresses to administrators (V2)', () => {
  it.each(['3.0', '5.0'] as Era[])('%s: an administrator gets every real address, a member only its own', async (era) => {
    const fake = await startFake({ era, emailAddressVisibility: 'admins' });
    const shim = await startShim(fake.url);
    try {
      for (const callerId of [ADMIN, MEMBER]) {
        const caller = fake.user(callerId);
        const res = await request(shim.url).get('/api/v1/users').set('Authorization', fake.auth(callerId));
        expect(res.status).toBe(200);
        for (const m of res.body.members as Record<string, unknown>[]) {
          expect(m).toEqual(modernUser(fake, fake.user(m.user_id as number), caller));
        }
        const addresses = (res.body.members as Record<string, unknown>[]).filter((m) => !m.is_bot).map((m) => m.delivery_email);
        expect(addresses.filter((a) => a !== null)).toHaveLength(callerId === ADMIN ? fake.humans().length : 1);
      }
    } finally {
      await shim.close();
      await fake.stop();
    }
  });
});

describe('a 9.0 upstream lacks nothing: every user route passes byte for byte (V4)', () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  beforeAll(async () => {
    fake = await startFake({ era: '9.0' });
    shim = await startShim(fake.url);
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });

  it.each(['/api/v1/users', `/api/v1/users/${MEMBER}`, '/api/v1/users/user12%40zulip.example.com', '/api/v1/users/999'])(
    '%s',
    async (path) => {
      const direct = await request(fake.url).get(path).set('Authorization', fake.auth(GUEST));
      const res = await request(shim.url).get(path).set('Authorization', fake.auth(GUEST));
      expect(res.status).toBe(direct.status);
      expect(res.text).toBe(direct.text);
      expect(res.headers['x-zulip-compat-backfilled']).toBeUndefined();
    },
  );

  it('register with realm_user', async () => {
    const form = { fetch_event_types: '["realm_user","user_settings"]', event_types: '["message"]' };
    const direct = await request(fake.url).post('/api/v1/register').set('Authorization', fake.auth(GUEST)).type('form').send(form);
    const res = await request(shim.url).post('/api/v1/register').set('Authorization', fake.auth(GUEST)).type('form').send(form);
    const strip = (t: string) => t.replace(/"queue_id":"[^"]+"/, '');
    expect(strip(res.text)).toBe(strip(direct.text));
    expect(res.headers['x-zulip-compat-backfilled']).toBeUndefined();
  });
});

describe('limits', () => {
  it('passes a user list over upstream.maxResponseBytes untouched, saying the backfill was skipped', async () => {
    const fake = await startFake({ era: '2.1', users: 40 });
    const shim = await startShim(fake.url, { upstream: { maxResponseBytes: 2048 } });
    try {
      const direct = await request(fake.url).get('/api/v1/users').set('Authorization', fake.auth(MEMBER));
      const res = await request(shim.url).get('/api/v1/users').set('Authorization', fake.auth(MEMBER));
      expect(res.status).toBe(200);
      expect(res.text).toBe(direct.text);
      expect(res.headers['x-zulip-compat-backfilled']).toBeUndefined();
      expect(shim.logs.some((l) => l.includes('user backfill skipped'))).toBe(true);
    } finally {
      await shim.close();
      await fake.stop();
    }
  });

  it('passes a register answer over upstream.maxResponseBytes untouched, saying the backfill was skipped (R2)', async () => {
    const fake = await startFake({ era: '2.1', users: 40 });
    const shim = await startShim(fake.url, { upstream: { maxResponseBytes: 2048 } });
    try {
      const form = { fetch_event_types: '["realm_user"]', event_types: '["message"]' };
      const direct = await request(fake.url).post('/api/v1/register').set('Authorization', fake.auth(MEMBER)).type('form').send(form);
      const res = await request(shim.url).post('/api/v1/register').set('Authorization', fake.auth(MEMBER)).type('form').send(form);
      expect(res.status).toBe(200);
      const strip = (t: string) => t.replace(/"queue_id":"[^"]+"/, '');
      expect(strip(res.text)).toBe(strip(direct.text));
      expect(shim.logs.some((l) => l.includes('user backfill skipped'))).toBe(true);
    } finally {
      await shim.close();
      await fake.stop();
    }
  });
});

describe("the caller's own user id, before 6.0 with hidden addresses (V2)", () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  afterEach(async () => {
    await shim?.close();
    await fake?.stop();
  });
  const start = async (era: Era, options?: Parameters<typeof startShim>[1]) => {
    fake = await startFake({ era });
    shim = await startShim(fake.url, options);
  };
  const usersMe = () => fake.stats.requests.get('GET /api/v1/users/me') ?? 0;
  /** The caller's own row in its GET /users (`auth` its credentials), after checking the answer is a 200. */
  const ownRow = async (
    callerId: number,
    path = '/api/v1/users',
    auth = (r: request.Test) => r.set('Authorization', fake.auth(callerId)),
  ) => {
    const res = await auth(request(shim.url).get(path));
    expect(res.status).toBe(200);
    return { res, own: (res.body.members as Record<string, unknown>[]).find((m) => m.user_id === callerId) };
  };

  it.each(['2.1', '5.0'] as Era[])('%s: is asked of GET /users/me once per caller, not once per GET /users', async (era) => {
    await start(era);
    for (const callerId of [MEMBER, MEMBER, MEMBER, ADMIN, ADMIN]) {
      const { res, own } = await ownRow(callerId);
      // Its own row carries its real address each time; the others' stay hidden.
      expect(own?.delivery_email).toBe(fake.user(callerId).delivery_email);
      expect(res.body.members.find((m: { user_id: number }) => m.user_id === GUEST).delivery_email).toBeNull();
    }
    // One per caller: the cache is keyed per caller, never shared between them.
    expect(usersMe()).toBe(2);
  });

  it('is kept within memory.callersBytes, the callers used longest ago going first (X2)', async () => {
    // Room for three callers at most (each costs 200 bytes and more): four in turn each find theirs gone.
    await start('3.0', { memory: { callersBytes: 1024 } });
    const four = fake
      .humans()
      .slice(0, 4)
      .map((u) => u.user_id);
    const callers = [...four, ...four];
    for (const callerId of callers) expect((await ownRow(callerId)).own?.delivery_email).toBe(fake.user(callerId).delivery_email);
    expect(usersMe()).toBe(callers.length);
  });

  it('is taken from the caller’s own profile call, so a GET /users after it asks nothing more', async () => {
    await start('3.0');
    expect((await request(shim.url).get('/api/v1/users/me').set('Authorization', fake.auth(MEMBER))).status).toBe(200);
    expect(usersMe()).toBe(1);
    const { own } = await ownRow(MEMBER);
    expect(own?.delivery_email).toBe(fake.user(MEMBER).delivery_email);
    // The own profile's answer told who the caller is: no second GET /users/me.
    expect(usersMe()).toBe(1);
  });

  it('under /json, asks register and deletes its queue with the session’s CSRF token, as Django requires', async () => {
    await start('3.0');
    const refused: string[] = [];
    fake.override = (req, res) => {
      if (req.method === 'GET' || !req.url?.startsWith('/json/') || req.headers['x-csrftoken'] === 'tok') return false;
      refused.push(`${req.method} ${req.url}`);
      res.writeHead(403, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ result: 'error', msg: 'CSRF error: CSRF token missing.', code: 'CSRF_FAILED' }));
      return true;
    };
    const { own } = await ownRow(MEMBER, '/json/users', (r) => r.set('Cookie', `sessionid=${fake.user(MEMBER).api_key}; csrftoken=tok`));
    expect(own?.delivery_email).toBe(fake.user(MEMBER).delivery_email);
    expect(refused).toEqual([]);
    expect(fake.openQueues.size).toBe(0);
  });

  it('left null when the register lookup fails, never the API email in its place (V2, E4)', async () => {
    await start('3.0');
    fake.override = failing('POST', '/api/v1/register');
    const { res, own } = await ownRow(MEMBER);
    expect(own?.delivery_email).toBeNull();
    expect(res.headers['x-zulip-compat-fallback']).toBeUndefined();
  });

  it('left unknown when GET /users/me fails: the list is still answered, the own address null (E4), and the failure not kept', async () => {
    await start('3.0');
    fake.override = failing('GET', '/api/v1/users/me');
    expect((await ownRow(MEMBER)).own?.delivery_email).toBeNull();
    expect(shim.logs.some((l) => l.includes('own row unknown'))).toBe(true);
    fake.override = undefined;
    expect((await ownRow(MEMBER)).own?.delivery_email).toBe(fake.user(MEMBER).delivery_email);
  });
});
