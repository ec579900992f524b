import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { USER_CHANGES, applyChanges, needsOf, pendingChanges, type OwnUser } from '../src/changes/index.js';
import { UNKNOWN_DATE_JOINED, avatarVersionFromUrl } from '../src/changes/fl010-avatar-guest-active-timezone-joined.js';
import { roleOf } from '../src/changes/fl059-role.js';
import { deliveryEmailOf, queueIdOf } from '../src/upstream/delivery-emails.js';
import { ignoredParameters } from '../src/profile/handler.js';
import { directoryOf, memberOf, type Member } from '../src/upstream/user-directory.js';

/** GET /users/me from a 2.1 server (zulip-server.md §10.5). */
const LEGACY_21: OwnUser = {
  result: 'success',
  msg: '',
  pointer: -1,
  client_id: '74c768b081076fdb3c4326256c17467e',
  max_message_id: 30,
  user_id: 5,
  avatar_url: 'https://secure.gravatar.com/avatar/af4f06322c177ef4e1e9b2c424986b54?d=identicon&version=3',
  full_name: 'Iago',
  email: 'iago@zulip.com',
  is_bot: false,
  is_admin: true,
  short_name: 'iago',
  profile_data: { '1': { value: 'x' } },
};

const MEMBER: Member = {
  user_id: 5,
  email: 'iago@zulip.com',
  is_bot: false,
  is_active: true,
  is_admin: true,
  is_guest: false,
  timezone: 'Europe/Berlin',
  date_joined: '2019-10-20T07:50:53.728864+00:00',
};

const MODERN_FIELDS = [
  'is_owner',
  'avatar_version',
  'is_guest',
  'is_active',
  'timezone',
  'date_joined',
  'role',
  'is_billing_admin',
  'delivery_email',
];

describe('the registry of own-profile changes (U2)', () => {
  it('lines the changes up by feature level, one per changelog entry', () => {
    expect(USER_CHANGES.map((c) => c.featureLevel)).toEqual([1, 8, 10, 59, 73, 83, 163]);
    expect(USER_CHANGES.flatMap((c) => c.user.fields)).toEqual([
      'bot_owner_id',
      'bot_type',
      ...MODERN_FIELDS.slice(0, -1),
      'is_system_bot',
      'delivery_email',
    ]);
  });

  it.each([
    [0, ['bot_owner_id', 'is_owner', 'avatar_version', 'role', 'is_billing_admin', 'is_system_bot', 'delivery_email']],
    [25, ['role', 'is_billing_admin', 'is_system_bot', 'delivery_email']],
    [65, ['is_billing_admin', 'is_system_bot', 'delivery_email']],
    [122, ['delivery_email']],
    [156, ['delivery_email']],
    [163, []],
    [237, []],
  ])('an upstream at feature level %i with nothing but 2.1 fields gets %j', (level, firstFields) => {
    expect(pendingChanges(level, LEGACY_21).map((c) => c.user.fields[0])).toEqual(firstFields);
  });

  it('skips a change whose fields the upstream already sent', () => {
    expect(pendingChanges(122, { ...LEGACY_21, delivery_email: 'iago@example.org' })).toEqual([]);
    expect(
      pendingChanges(0, { ...LEGACY_21, is_owner: false, bot_owner_id: null, bot_type: null, is_system_bot: false }).map(
        (c) => c.featureLevel,
      ),
    ).toEqual([10, 59, 73, 163]);
  });

  it('asks only for the lookups the pending changes need', () => {
    expect([...needsOf(pendingChanges(0, LEGACY_21))].sort()).toEqual(['delivery_email', 'member']);
    expect([...needsOf(pendingChanges(25, LEGACY_21))]).toEqual(['delivery_email']);
    expect([...needsOf(pendingChanges(65, { ...LEGACY_21, delivery_email: 'a@b.c' }))]).toEqual([]);
  });

  it('fills a 2.1 answer with the looked-up values, in order, and keeps every upstream field (U1)', () => {
    const { user, added, sources } = applyChanges(LEGACY_21, pendingChanges(0, LEGACY_21), {
      member: MEMBER,
      deliveryEmail: 'iago@example.org',
    });
    expect(added).toEqual(MODERN_FIELDS);
    for (const [k, v] of Object.entries(LEGACY_21)) expect(user[k]).toEqual(v);
    expect(user).toMatchObject({
      is_owner: false,
      avatar_version: 3,
      is_guest: false,
      is_active: true,
      timezone: 'Europe/Berlin',
      date_joined: '2019-10-20T07:50:53.728864+00:00',
      role: 200,
      is_billing_admin: false,
      delivery_email: 'iago@example.org',
    });
    expect(sources).toEqual({
      is_owner: 'rule',
      avatar_version: 'rule',
      is_guest: 'lookup',
      is_active: 'lookup',
      timezone: 'lookup',
      date_joined: 'lookup',
      role: 'rule',
      is_billing_admin: 'rule',
      delivery_email: 'lookup',
    });
  });

  it('uses the documented rules when the lookups failed, and says so', () => {
    const { user, sources } = applyChanges({ ...LEGACY_21, avatar_url: '/user_avatars/2/abc.png' }, pendingChanges(0, LEGACY_21), {});
    expect(user).toMatchObject({
      avatar_version: 1,
      is_guest: false,
      is_active: true,
      timezone: '',
      date_joined: UNKNOWN_DATE_JOINED,
      delivery_email: 'iago@zulip.com',
    });
    expect(
      Object.entries(sources)
        .filter(([, s]) => s === 'fallback')
        .map(([k]) => k),
    ).toEqual(['avatar_version', 'is_guest', 'timezone', 'date_joined', 'delivery_email']);
    expect(sources.is_active).toBe('rule');
  });

  it('prefers the register answer, then the user list, for delivery_email', () => {
    const changes = pendingChanges(122, LEGACY_21);
    const withList = { ...MEMBER, delivery_email: 'list@example.org' };
    expect(applyChanges(LEGACY_21, changes, { deliveryEmail: 'reg@example.org', member: withList }).user.delivery_email).toBe(
      'reg@example.org',
    );
    expect(applyChanges(LEGACY_21, changes, { member: withList }).user.delivery_email).toBe('list@example.org');
  });

  it('takes avatar_version from the user list where it has one', () => {
    const { user, sources } = applyChanges(LEGACY_21, pendingChanges(0, LEGACY_21), { member: { ...MEMBER, avatar_version: 7 } });
    expect(user.avatar_version).toBe(7);
    expect(sources.avatar_version).toBe('lookup');
  });

  it('does not accept a date_joined without an offset (U3)', () => {
    const { user } = applyChanges(LEGACY_21, pendingChanges(0, LEGACY_21), { member: { ...MEMBER, date_joined: '2019-10-20T07:50:53' } });
    expect(user.date_joined).toBe(UNKNOWN_DATE_JOINED);
  });

  it('derives role from the flags a guest row gives', () => {
    const guest = { ...LEGACY_21, is_admin: false };
    const { user } = applyChanges(guest, pendingChanges(0, guest), { member: { ...MEMBER, is_admin: false, is_guest: true } });
    expect(user).toMatchObject({ is_guest: true, is_owner: false, role: 600 });
  });

  it('never touches a field an upstream sent, even one it would have derived differently (U1)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 400 }),
        fc.subarray(MODERN_FIELDS),
        fc.option(fc.constant(MEMBER), { nil: undefined }),
        fc.option(fc.emailAddress(), { nil: undefined }),
        (level, present, member, email) => {
          const upstream: Record<string, unknown> = { ...LEGACY_21 };
          for (const f of present) upstream[f] = `upstream:${f}`;
          const { user, added } = applyChanges(upstream, pendingChanges(level, upstream), { member, deliveryEmail: email });
          for (const [k, v] of Object.entries(upstream)) expect(user[k]).toBe(v);
          // Exactly the missing fields of the changes newer than the upstream are added.
          // (Bot fields never go on a human: V2.)
          const expected = USER_CHANGES.filter((c) => c.featureLevel > level)
            .flatMap((c) => c.user.fields)
            .filter((f) => !present.includes(f) && f !== 'bot_owner_id' && f !== 'bot_type' && f !== 'is_system_bot');
          expect(added).toEqual(expected);
        },
      ),
    );
  });

  it('always gives a role consistent with the flags it was derived from (U3)', () => {
    fc.assert(
      fc.property(fc.boolean(), fc.boolean(), fc.boolean(), (owner, admin, guest) => {
        fc.pre(!(guest && (owner || admin)) && !(owner && !admin));
        const r = roleOf({ is_owner: owner, is_admin: admin, is_guest: guest });
        expect(r === 100).toBe(owner);
        expect(r === 100 || r === 200).toBe(admin);
        expect(r === 600).toBe(guest);
      }),
    );
  });
});

describe('avatar_version from a 2.1 avatar URL', () => {
  it.each([
    ['https://secure.gravatar.com/avatar/af4f?d=identicon&version=1', 1],
    ['https://secure.gravatar.com/avatar/af4f?d=identicon&version=12', 12],
    ['/user_avatars/2/4b6c.png?x=x&version=3', 3],
    ['/user_avatars/2/4b6c.png?v=4', 4],
    ['/user_avatars/2/4b6c.png', undefined],
    ['/user_avatars/2/4b6c.png?version=', undefined],
    ['/user_avatars/2/4b6c.png?version=0', undefined],
    ['/user_avatars/2/4b6c.png?version=abc', undefined],
    [null, undefined],
  ])('%s → %s', (url, version) => {
    expect(avatarVersionFromUrl(url)).toBe(version);
  });
});

describe('register answers (delivery_email lookup)', () => {
  it('finds the queue id, also in a body that is not JSON', () => {
    expect(queueIdOf(Buffer.from('{"queue_id":"1517975029:0","result":"success"}'))).toBe('1517975029:0');
    expect(queueIdOf(Buffer.from('{"result":"success","queue_id":"1517975029:0","realm_users":[{"a'))).toBe('1517975029:0');
    expect(queueIdOf(Buffer.from('<html>'))).toBeUndefined();
  });

  it('reads delivery_email only for the user it was asked for', () => {
    expect(deliveryEmailOf(Buffer.from('{"user_id":5,"delivery_email":"a@b.c"}'), 5)).toBe('a@b.c');
    expect(() => deliveryEmailOf(Buffer.from('{"user_id":6,"delivery_email":"a@b.c"}'), 5)).toThrow(/another user/);
    expect(() => deliveryEmailOf(Buffer.from('{"user_id":5}'), 5)).toThrow(/no delivery_email/);
    expect(() => deliveryEmailOf(Buffer.from('nope'), 5)).toThrow(/not JSON/);
  });
});

describe('ignored_parameters_unsupported (U5)', () => {
  it.each([
    ['/api/v1/users/me', []],
    ['/api/v1/users/me?', []],
    ['/api/v1/users/me?b=1&a=2&b=3', ['a', 'b']],
    ['/api/v1/users/me?client_gravatar=true', ['client_gravatar']],
  ])('%s → %j', (url, names) => {
    expect(ignoredParameters(url)).toEqual(names);
  });
});

describe('the user directory parser', () => {
  it('reads every era’s members and skips rows without an id or email', async () => {
    const dir = await directoryOf(
      {
        members: [
          { ...MEMBER, is_owner: true, role: 100, avatar_version: 2, delivery_email: 'd@e.f', full_name: 'Iago' },
          { user_id: 'x', email: 'a@b.c' },
          { user_id: 6, email: 'bot@b.c', is_bot: true },
          null,
        ],
      },
      42,
    );
    expect([...dir.userIds()]).toEqual([5, 6]);
    expect(dir.member(dir.idOf('iago@zulip.com')!)).toMatchObject({
      role: 100,
      is_owner: true,
      avatar_version: 2,
      delivery_email: 'd@e.f',
    });
    expect(dir.member(6)).toEqual({
      user_id: 6,
      email: 'bot@b.c',
      is_bot: true,
      is_active: true,
      is_admin: false,
      is_guest: false,
      timezone: '',
      date_joined: '',
    });
    expect(dir.fetchedAt).toBe(42);
    expect(memberOf('x')).toBeUndefined();
    await expect(directoryOf({ result: 'success' }, 0)).rejects.toThrow(/members/);
  });
});
