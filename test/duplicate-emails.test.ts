import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { directoryOf } from '../src/upstream/user-directory.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { startShim, type RunningShim } from './support/shim.js';

/** X10: two users with one email in a 2.1 user list: presence never goes to the wrong one. */

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

  let fake: FakeZulip;
  let shim: RunningShim;
  afterEach(async () => {
    await shim?.close();
    await fake?.stop();
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
