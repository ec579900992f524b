import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { directoryOf } from '../src/upstream/user-directory.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { startShim, type RunningShim } from './support/shim.js';

/** X10: two users with one email in a 2.1 user list: presence never goes to the wrong one. */

let fake: FakeZulip;
let shim: RunningShim;
afterEach(async () => {
  await shim?.close();
  await fake?.stop();
});

const member = (user_id: number, email: string, is_active: boolean) => ({ user_id, email, is_active, date_joined: '' });

describe('an email several users share (X10)', () => {
  it('maps to the one active user, or to nobody when that is not one', async () => {
    const dir = await directoryOf(
      {
        members: [
          member(5, 'a@x', true),
          member(6, 'a@x', false),
          member(7, 'b@x', false),
          member(8, 'b@x', true),
          member(9, 'c@x', true),
          member(10, 'c@x', true),
          member(11, 'd@x', false),
          member(12, 'd@x', false),
          member(13, 'e@x', true),
        ],
      },
      0,
    );
    expect(dir.idOf('a@x')).toBe(5);
    expect(dir.idOf('b@x')).toBe(8);
    expect(dir.idOf('c@x')).toBeUndefined();
    expect(dir.idOf('d@x')).toBeUndefined();
    expect(dir.idOf('e@x')).toBe(13);
    expect([...dir.ambiguousEmails].sort()).toEqual(['a@x', 'b@x', 'c@x', 'd@x']);
  });

  it('on a 2.1 upstream, attributes presence to the active user and logs the ambiguity once', async () => {
    fake = await startFake({ era: '2.1' });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    // A deactivated account listed after the active one with the same email.
    fake.users.push({ ...fake.user(12), user_id: 99, is_active: false, api_key: 'other' });
    shim = await startShim(fake.url, { presence: { coalesceMs: 0 } });
    const poll = () =>
      request(shim.url)
        .post('/api/v1/users/me/presence')
        .set('Authorization', fake.auth(10))
        .type('form')
        .send({ status: 'active', last_update_id: '-1' });
    for (let i = 0; i < 3; i++) {
      const r = await poll();
      expect(r.status).toBe(200);
      expect(Object.keys(r.body.presences)).toContain('12');
      expect(Object.keys(r.body.presences)).not.toContain('99');
    }
    expect(shim.logs.filter((l) => l.includes('share an email'))).toHaveLength(1);
    // The shared email is known: it causes no extra user-list reads.
    expect(fake.stats.usersList).toBe(1);
  });
});

describe("a 2.1 bot whose owner's email several users share (X10)", () => {
  it.each([
    ['GET /users', () => '/api/v1/users'],
    ['GET /users/{id}', (bot: number) => `/api/v1/users/${bot}`],
  ])('%s: gets bot_owner_id null, named as a fallback, and the ambiguity is logged once for the realm', async (_, pathOf) => {
    fake = await startFake({ era: '2.1' });
    const bot = fake.users.find((u) => u.is_bot)!;
    // A second active account with the email of the bot's owner (user 10): the owner is ambiguous.
    fake.users.push({ ...fake.user(bot.bot_owner_id!), user_id: 98, api_key: 'other' });
    shim = await startShim(fake.url);
    for (let i = 0; i < 2; i++) {
      const r = await request(shim.url).get(pathOf(bot.user_id)).set('Authorization', fake.auth(11));
      expect(r.status).toBe(200);
      const row = r.body.user ?? r.body.members.find((m: { user_id: number }) => m.user_id === bot.user_id);
      expect(row).toMatchObject({ user_id: bot.user_id, bot_owner_id: null });
      expect(r.headers['x-zulip-compat-fallback']).toContain('bot_owner_id');
    }
    const logged = shim.logs.filter((l) => l.includes("bot's owner"));
    expect(logged).toHaveLength(1);
    expect(JSON.parse(logged[0]!)).toMatchObject({ level: 40, shared: 1, unmapped: 1, userIds: [null] });
  });

  it('in a register answer too', async () => {
    fake = await startFake({ era: '2.1' });
    const row = (user_id: number, email: string, extra: Record<string, unknown> = {}) => ({
      user_id,
      email,
      full_name: `User ${user_id}`,
      is_admin: false,
      is_active: true,
      is_bot: false,
      ...extra,
    });
    // The fake leaves bots out of realm_users; this answer has one, owned by a shared email.
    fake.override = (req, res) => {
      if (req.url !== '/api/v1/register') return false;
      const realm_users = [
        row(10, 'owner@x'),
        row(98, 'owner@x'),
        row(16, 'bot16-bot@x', { is_bot: true, bot_type: 1, bot_owner: 'owner@x' }),
      ];
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ result: 'success', msg: '', queue_id: 'q', last_event_id: -1, realm_users, user_id: 11 }));
      return true;
    };
    shim = await startShim(fake.url);
    for (let i = 0; i < 2; i++) {
      const r = await request(shim.url)
        .post('/api/v1/register')
        .set('Authorization', fake.auth(11))
        .type('form')
        .send({ fetch_event_types: '["realm_user"]' });
      expect(r.status).toBe(200);
      expect(r.body.realm_users.find((m: { user_id: number }) => m.user_id === 16)).toMatchObject({ bot_owner_id: null });
    }
    expect(shim.logs.filter((l) => l.includes("bot's owner"))).toHaveLength(1);
  });
});
