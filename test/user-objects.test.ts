import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseParams } from '../src/http/body.js';
import {
  CHANGES,
  USER_CHANGES,
  changesAbove,
  checkedBundle,
  emulatedUserFeatures,
  noneAdded,
  type ApiChange,
} from '../src/changes/index.js';
import { emailIsPublic } from '../src/changes/fl163-delivery-email.js';
import { backfillList, emailIndex, parseWithListInSteps, stringifyInSteps, USERS_PER_TURN } from '../src/profile/user-objects.js';
import { userKeyOf } from '../src/profile/users-handler.js';
import { addedHeaders, BACKFILLED_HEADER, FALLBACK_HEADER } from '../src/changes/added-headers.js';
import { eventTypesOf, registerNeedsUsers } from '../src/register/users.js';
import { emulatedFeatures } from '../src/server-settings.js';
import { ERA_FEATURE_LEVEL, ERAS, FakeZulip, type FakeUser } from './support/fake-zulip.js';
import { compileSchema } from './support/schema.js';

/**
 * The modern user object (V1–V4, U1): the change bundle checks itself at load, delivery_email
 * follows the caller's rights, every backfilled object is a valid modern UserBase that agrees with
 * the upstream, in register and on the single-user paths.
 */

const validateUser = compileSchema('user-base.schema.json');

const change = (featureLevel: number, feature: string, fields: string[]): ApiChange => ({
  featureLevel,
  feature,
  user: { fields, needs: [], fill: () => ({}) },
});

describe('the bundle of user-object changes checks itself at load', () => {
  it('is sorted, each field and feature introduced once', () => {
    expect(() => checkedBundle(CHANGES)).not.toThrow();
    expect(CHANGES.map((c) => c.featureLevel)).toEqual([...CHANGES.map((c) => c.featureLevel)].sort((a, b) => a - b));
  });

  it.each([
    ['unsorted', [change(10, 'a', ['x']), change(8, 'b', ['y'])], /8 \(b\) is below 10/],
    ['a change at level 0', [change(0, 'a', ['x'])], /is not a level/],
    ['a change that changes nothing', [{ featureLevel: 8, feature: 'a' }], /a changes nothing/],
    ['an emulation done nowhere', [{ featureLevel: 8, feature: 'a', emulation: { by: ' ' } }], /a is emulated nowhere/],
    ['a field twice', [change(8, 'a', ['x']), change(10, 'b', ['x'])], /x introduced twice/],
    ['a feature twice', [change(8, 'a', ['x']), change(10, 'a', ['y'])], /named twice/],
  ])('rejects a bundle with %s', (_name, bundle, error) => {
    expect(() => checkedBundle(bundle)).toThrow(error);
  });

  it('takes several changes at one level, as Zulip’s changelog lists several under one', () => {
    expect(checkedBundle([change(8, 'a', ['x']), change(8, 'b', ['y'])]).map((c) => c.feature)).toEqual(['a', 'b']);
  });

  it('names what server_settings says it emulates (T2), from the bundle alone', () => {
    expect(emulatedUserFeatures(0)).toEqual(USER_CHANGES.map((c) => c.feature));
    expect(emulatedUserFeatures(163)).toEqual([]);
    expect(emulatedUserFeatures(65)).toEqual(['user_is_billing_admin', 'user_is_system_bot', 'user_delivery_email']);
    expect(emulatedFeatures(0)).toEqual(
      expect.arrayContaining(['own_user_fields', 'user_bot_owner_id', 'get_user_by_id', 'register_user_settings']),
    );
    expect(emulatedFeatures(65)).not.toContain('get_user_by_email');
    expect(emulatedFeatures(277)).toEqual([]);
    // One filter over the registry: every change with a user-object part or an emulation, none else.
    expect(emulatedFeatures(0)).toEqual(['own_user_fields', ...CHANGES.filter((c) => c.user || c.emulation).map((c) => c.feature)]);
    expect(emulatedFeatures(0)).not.toContain('presence_settings'); // the app's part, and W2's fill: not named
  });
});

describe('delivery_email for other users (V2)', () => {
  it.each([
    [{ user_id: 12, email: 'user12@zulip.example.com' }, false],
    [{ user_id: 12, email: 'User12@Chat.Example.com' }, false],
    [{ user_id: 12, email: 'user120@zulip.example.com' }, true],
    [{ user_id: 12, email: 'iago@example.org' }, true],
    [{ user_id: 12, email: 'user12@zulip.example.com', is_bot: true }, true],
    [{ user_id: 12 }, false],
  ])('%j: the API email is the real one → %s', (user, isPublic) => {
    expect(emailIsPublic(user)).toBe(isPublic);
  });
});

const ROLES = [100, 200, 300, 400, 600] as const;

const fakeUser = fc.record({
  user_id: fc.integer({ min: 20, max: 100_000 }),
  role: fc.constantFrom(...ROLES),
  is_bot: fc.boolean(),
  is_billing_admin: fc.boolean(),
  is_active: fc.boolean(),
  timezone: fc.constantFrom('', 'Europe/Berlin', 'America/New_York'),
  avatar_version: fc.integer({ min: 1, max: 50 }),
  joined: fc.integer({ min: 1_300_000_000, max: 1_900_000_000 }),
  publicEmail: fc.boolean(),
  ownerless: fc.boolean(),
});

describe('for any user and era, the backfilled object is a modern UserBase that agrees with the upstream (V1, U1)', () => {
  it('holds for GET /users rows as each era writes them', () => {
    fc.assert(
      fc.property(fc.constantFrom(...ERAS.filter((e) => e !== '9.0')), fakeUser, fc.constantFrom(10, 11, 13, 14), (era, g, viewerId) => {
        const fake = new FakeZulip({ era, users: 5 }); // records only, not started
        const email = g.publicEmail ? `person${g.user_id}@example.org` : `user${g.user_id}@zulip.example.com`;
        const u: FakeUser = {
          ...fake.user(13),
          user_id: g.user_id,
          email: g.is_bot ? `bot${g.user_id}-bot@zulip.example.com` : email,
          delivery_email: g.is_bot ? `bot${g.user_id}-bot@zulip.example.com` : `person${g.user_id}@example.org`,
          role: g.is_bot ? 400 : g.role,
          is_bot: g.is_bot,
          is_billing_admin: g.is_billing_admin,
          is_active: g.is_active,
          timezone: g.timezone,
          avatar_version: g.avatar_version,
          date_joined: new Date(g.joined * 1000).toISOString().replace('Z', '+00:00'),
          ...(g.is_bot ? { bot_type: 1, ...(g.ownerless ? {} : { bot_owner_id: 10 }) } : {}),
        };
        if (g.is_bot && g.ownerless) delete u.bot_owner_id;
        fake.users.push(u);
        // As on the wire: through JSON.
        const rows = JSON.parse(JSON.stringify(fake.users.map((x) => fake.userObject(x, false, fake.user(viewerId))))) as Record<
          string,
          unknown
        >[];
        const upstream = structuredClone(rows.at(-1)!);
        const into = noneAdded();
        void backfillList(rows, changesAbove(ERA_FEATURE_LEVEL[era]), into, { idOfEmail: emailIndex([rows]) });
        const out = rows.at(-1)!;
        expect(validateUser(out) ? [] : validateUser.errors).toEqual([]);
        for (const [k, v] of Object.entries(upstream)) expect(out[k]).toEqual(v);
        // U3: role agrees with the flags.
        expect(out.role === 100).toBe(out.is_owner);
        expect(out.role === 600).toBe(out.is_guest);
        if (out.role === 100 || out.role === 200) expect(out.is_admin).toBe(true);
        // V2: a hidden address is never guessed.
        if (!('delivery_email' in upstream)) expect(out.delivery_email).toBe(g.publicEmail || g.is_bot ? u.email : null);
        if (g.is_bot) expect(out.bot_owner_id).toBe(g.ownerless ? null : 10);
      }),
    );
  });

  it('yields to the event loop between steps of a long list, and fills every row', async () => {
    const rows: Record<string, unknown>[] = Array.from({ length: USERS_PER_TURN * 3 + 1 }, (_, i) => ({
      user_id: i,
      email: `user${i}@x.example`,
      is_admin: false,
    }));
    const done = backfillList(rows, changesAbove(0), noneAdded(), { idOfEmail: () => undefined });
    // Another request's turn comes while the list is half done: one step, then a yield.
    await new Promise((resolve) => setImmediate(resolve));
    expect('role' in rows[USERS_PER_TURN * 2 - 1]!).toBe(true);
    expect('role' in rows[USERS_PER_TURN * 2]!).toBe(false);
    await done;
    expect(rows.every((r) => 'role' in r && 'delivery_email' in r)).toBe(true);
  });
});

describe('serialising in steps (V4)', () => {
  it('keeps an upstream key named __proto__', async () => {
    const body = JSON.parse('{"__proto__":{"a":1},"msg":"","members":[{"user_id":1}]}') as Record<string, unknown>;
    const out = await stringifyInSteps(body, ['members']);
    expect(JSON.parse(out.toString())).toEqual(JSON.parse(JSON.stringify(body)));
  });

  it('means the same JSON as one JSON.stringify', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(fc.string(), fc.jsonValue()),
        fc.array(fc.jsonValue(), { maxLength: USERS_PER_TURN * 2 + 3 }),
        async (rest, members) => {
          const body = { ...rest, members };
          const out = await stringifyInSteps(body, ['members', 'absent']);
          expect(JSON.parse(out.toString())).toEqual(JSON.parse(JSON.stringify(body)));
        },
      ),
      { numRuns: 30 },
    );
  });
});

describe('register (V3)', () => {
  const params = (form: Record<string, string>) =>
    parseParams(
      { headers: { 'content-type': 'application/x-www-form-urlencoded' } } as never,
      Buffer.from(new URLSearchParams(form).toString()),
    );

  it.each([
    [0, {}, true],
    [0, { fetch_event_types: '["message"]' }, false],
    [65, { fetch_event_types: '["realm_user"]' }, true],
    [122, { fetch_event_types: '["user_settings"]' }, false],
    [65, { fetch_event_types: '["user_settings"]' }, true],
    [163, { fetch_event_types: '["realm_user","user_settings"]' }, false],
    [0, { event_types: '["realm_user"]' }, true],
    [0, { fetch_event_types: 'nonsense' }, false],
  ])('feature level %i with %j reads the answer: %s', async (level, form, expected) => {
    expect(registerNeedsUsers(level, eventTypesOf(await params(form)))).toBe(expected);
  });
});

describe('single-user paths', () => {
  it.each([
    ['/api/v1/users/12', { userId: 12 }],
    ['/json/users/12?client_gravatar=true', { userId: 12 }],
    ['/api/v1/users/iago%40zulip.com', { email: 'iago@zulip.com' }],
    ['/api/v1/users/iago@zulip.com', { email: 'iago@zulip.com' }],
    ['/api/v1/users/%E0%A4%A', { email: '%E0%A4%A' }],
    ['/api/v1/users/12a', { email: '12a' }],
    ['/api/v1/users/me', undefined],
  ])('%s → %j', (url, key) => {
    expect(userKeyOf(url)).toEqual(key);
  });
});

describe('parsing a long list in steps (V4)', () => {
  const whole = (b: Buffer) => JSON.parse(b.toString()) as Record<string, unknown>;

  it('reads what JSON.parse reads, for any object and list', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(fc.string(), fc.jsonValue()),
        fc.array(fc.jsonValue(), { maxLength: USERS_PER_TURN * 2 + 3 }),
        fc.boolean(),
        async (rest, members, spaced) => {
          const body = { ...rest, members };
          const text = spaced ? JSON.stringify(body, null, 1) : JSON.stringify(body);
          expect(await parseWithListInSteps(Buffer.from(text), 'members', whole)).toEqual(JSON.parse(text));
        },
      ),
      { numRuns: 40 },
    );
  });

  /** JSON.parse's value, or 'throws'. */
  const parsed = (text: string) => {
    try {
      return { value: JSON.parse(text) as unknown };
    } catch {
      return 'throws';
    }
  };
  const inSteps = (text: string) =>
    parseWithListInSteps(Buffer.from(text), 'members', whole).then(
      (value) => ({ value }),
      () => 'throws',
    );

  it('reads what JSON.parse reads for an object written with repeated keys, escaped ones too (the last one counts)', async () => {
    const key = fc.constantFrom('"members"', '"mem\\u0062ers"', '"result"', '"x"');
    const value = fc.oneof(fc.jsonValue(), fc.array(fc.jsonValue(), { maxLength: 5 }));
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(key, value), { maxLength: 6 }), async (pairs) => {
        const text = `{${pairs.map(([k, v]) => `${k}:${JSON.stringify(v)}`).join(',')}}`;
        expect(await inSteps(text)).toEqual(parsed(text));
      }),
      { numRuns: 300 },
    );
  });

  it('reads what JSON.parse reads, or throws where it throws, for a text with one character changed or cut', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 3 }),
        fc.array(fc.jsonValue(), { maxLength: 8 }),
        fc.nat(),
        fc.constantFrom('', '"', '\\', ',', '[', ']', '{', '}', ':', ' ', 'x'),
        async (rest, members, at, put) => {
          const text = JSON.stringify({ ...rest, members });
          const i = at % text.length;
          const changed = `${text.slice(0, i)}${put}${text.slice(i + 1)}`;
          expect(await inSteps(changed)).toEqual(parsed(changed));
        },
      ),
      // seed 1997677921: the list closed by a `}` was read as a list
      { numRuns: 300, examples: [[{}, [false], 17, '}']] },
    );
  });

  it.each([
    ['no such key', '{"result":"success","other":[1,2]}'],
    ['the key as a value', '{"a":"members","b":[1]}'],
    ['quotes and brackets in strings', '{"x":"\\"members\\":[","members":[{"n":"a]\\\\"},"[,]"]}'],
    ['an empty list', '{"members":[ ]}'],
    ['a nested members key', '{"a":{"members":[1]},"members":[2,3]}'],
    ['the key twice: the last counts', '{"members":[1],"members":[2]}'],
    ['the key twice, the second escaped', '{"members":[1],"mem\\u0062ers":5}'],
  ])('%s', async (_name, text) => {
    expect(await parseWithListInSteps(Buffer.from(text), 'members', whole)).toEqual(JSON.parse(text));
  });

  it('fails as JSON.parse does on a body that is not JSON', async () => {
    await expect(parseWithListInSteps(Buffer.from('{"members":[1,}'), 'members', whole)).rejects.toThrow(SyntaxError);
    await expect(parseWithListInSteps(Buffer.from('<html>'), 'members', whole)).rejects.toThrow(SyntaxError);
  });
});

describe('the U4 headers, one writer for the own profile, GET /users and register', () => {
  it('names every added field, the fallbacks apart, and nothing when nothing was added', () => {
    expect(addedHeaders(undefined)).toEqual({});
    expect(addedHeaders(noneAdded())).toEqual({});
    expect(addedHeaders({ added: ['is_owner', 'bot_owner_id'], sources: { is_owner: 'rule', bot_owner_id: 'lookup' } })).toEqual({
      [BACKFILLED_HEADER]: 'is_owner,bot_owner_id',
    });
    expect(
      addedHeaders({
        added: ['is_owner', 'delivery_email', 'bot_owner_id'],
        sources: { is_owner: 'rule', delivery_email: 'fallback', bot_owner_id: 'fallback' },
      }),
    ).toEqual({ [BACKFILLED_HEADER]: 'is_owner,delivery_email,bot_owner_id', [FALLBACK_HEADER]: 'delivery_email,bot_owner_id' });
  });
});

describe('a 2.1 bot owner named by an email several rows share (X10)', () => {
  const rows = (activeOfSecond: boolean | undefined) => [
    { user_id: 21, email: 'Owner@example.com', is_active: true },
    { user_id: 22, email: 'owner@example.com', ...(activeOfSecond === undefined ? {} : { is_active: activeOfSecond }) },
  ];
  it('maps to the one active user, never to a deactivated one listed later', () => {
    expect(emailIndex([rows(false)])('owner@EXAMPLE.com')).toBe(21);
    expect(emailIndex([[rows(false)[1]!], [rows(false)[0]!]])('owner@example.com')).toBe(21);
  });
  it('maps to nobody when two are active (or carry no is_active), and a single row whatever its state', () => {
    expect(emailIndex([rows(true)])('owner@example.com')).toBeUndefined();
    expect(emailIndex([rows(undefined)])('owner@example.com')).toBeUndefined();
    expect(emailIndex([[rows(false)[1]!]])('owner@example.com')).toBe(22);
  });
});
