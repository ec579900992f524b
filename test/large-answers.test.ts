import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { ShimError } from '../src/http/errors.js';
import { toModern, type PresenceEra, type UserLookup } from '../src/presence/convert.js';
import { modernFromColumns, readPresenceAnswer } from '../src/presence/columns.js';
import { memberOf, packMember, readUserList, unpackMember, userColumnsFromRows } from '../src/upstream/large-answers.js';
import { PARSE_POOL, ParsePool } from '../src/parse/parse-worker.js';
import { Directory, emailPicks } from '../src/upstream/user-directory.js';

/**
 * B7: the column readers that run off the main thread give exactly what the object-per-user
 * conversions give (P2), and the worker pool gives what the main thread gives.
 */

const pool = new ParsePool({ workers: 1, inlineBelowBytes: 0 });
afterAll(() => pool.close());

const ts = fc.integer({ min: 1_500_000_000, max: 1_700_000_000 });
const legacyEntry = fc.record(
  {
    website: fc.record({ client: fc.constant('website'), status: fc.constantFrom('active', 'idle'), timestamp: ts }),
    ZulipMobile: fc.record({ client: fc.constant('ZulipMobile'), status: fc.constantFrom('active', 'idle'), timestamp: ts }),
    aggregated: fc.record({ client: fc.constant('website'), status: fc.constantFrom('active', 'idle', 'offline'), timestamp: ts }),
  },
  { requiredKeys: [] },
);
const slimEntry = fc.record({ active_timestamp: ts, idle_timestamp: ts }, { requiredKeys: [] });

/** Users 1..n: u<id>@x, joined at 1e9 + id (some unknown to the lookup, some without date_joined). */
const lookup: UserLookup = {
  idOf: (email) => {
    const id = Number(/^u(\d+)@x$/.exec(email)?.[1]);
    return Number.isInteger(id) && id % 7 !== 0 ? id : undefined;
  },
  dateJoinedOf: (id) => (id % 3 === 0 ? undefined : 1_000_000_000 + id),
};

const bytes = (v: unknown) => Buffer.from(JSON.stringify(v));

describe('presence columns', () => {
  it.each<[PresenceEra, fc.Arbitrary<unknown>, (i: number) => string]>([
    ['legacy', legacyEntry, (i) => `u${i}@x`],
    ['old-slim', slimEntry, (i) => String(i)],
    ['exact-slim', slimEntry, (i) => String(i)],
  ])('%s: the same modern entries as toModern, through the worker and in place', async (era, entry, key) => {
    await fc.assert(
      fc.asyncProperty(fc.array(entry, { maxLength: 30 }), async (entries) => {
        const presences = Object.fromEntries(entries.map((e, i) => [key(i + 1), e]));
        const body = bytes({ result: 'success', msg: '', server_timestamp: 1.5, presences });
        const expected = toModern(era, presences, lookup);
        const inPlace = await modernFromColumns(readPresenceAnswer(body, era), lookup);
        const viaWorker = await modernFromColumns((await pool.presenceAnswer(body, era)).columns, lookup);
        expect(inPlace.presences).toEqual(expected.presences);
        expect(viaWorker.presences).toEqual(expected.presences);
        // Unknown emails among the convertible users (the ones a refresh could add).
        for (const email of inPlace.unknownEmails) expect(expected.unknownEmails).toContain(email);
      }),
      { numRuns: 40 },
    );
  });

  it('legacy keys resolved through an email table where read give the same entries; the rest through the caller', async () => {
    // The table knows users 1..15 (some of them not in the lookup either: 7, 14); the lookup
    // knows the ones it knows. Entries for 16+ reach the caller as unknown keys.
    const table = {
      emails: Array.from({ length: 15 }, (_, i) => `u${i + 1}@x`).join('\n'),
      ids: Int32Array.from({ length: 15 }, (_, i) => i + 1),
    };
    await fc.assert(
      fc.asyncProperty(fc.array(legacyEntry, { maxLength: 30 }), async (entries) => {
        const presences = Object.fromEntries(entries.map((e, i) => [`u${i + 1}@x`, e]));
        const body = bytes({ result: 'success', msg: '', server_timestamp: 1.5, presences });
        const expected = toModern('legacy', presences, lookup);
        const viaWorker = await modernFromColumns((await pool.presenceAnswer(body, 'legacy', table)).columns, lookup);
        // The table vouches for 7 and 14 although the lookup does not: they come through.
        for (const id of [7, 14])
          if (entries.length >= id && viaWorker.presences.has(id)) expected.presences.set(id, viaWorker.presences.get(id)!);
        expect(new Map([...viaWorker.presences].sort((a, b) => a[0] - b[0]))).toEqual(
          new Map([...expected.presences].sort((a, b) => a[0] - b[0])),
        );
      }),
      { numRuns: 30 },
    );
  });

  it('keeps the top-level fields and gives the caller its bytes back', async () => {
    const top = { result: 'success', msg: '', server_timestamp: 2.5, zulip_version: '2.1' };
    const small = bytes({ ...top, presences: {} });
    // A buffer that is all of its memory is moved to the worker and back, not copied.
    const large = Buffer.alloc(small.length + 64 * 1024, ' ');
    small.copy(large);
    for (const body of [small, large]) {
      const text = body.toString();
      const { columns, bytes: back } = await pool.presenceAnswer(body, undefined);
      expect(columns.top).toEqual(top);
      expect(columns.count).toBe(0);
      expect(back.toString()).toBe(text);
    }
    expect(large.length).toBe(0); // moved: the caller uses what came back
  });

  it.each([
    ['not JSON', Buffer.from('<html>')],
    ['no presences', bytes({ result: 'success' })],
    ['an array', bytes([1])],
  ])('%s is UPSTREAM_BAD_RESPONSE (E2), from the worker too', async (_name, body) => {
    for (const p of [pool, new ParsePool({ ...PARSE_POOL, workers: 0 })]) {
      const e = await p.presenceAnswer(body, 'legacy').catch((x: unknown) => x);
      expect(e).toBeInstanceOf(ShimError);
      expect((e as ShimError).code).toBe('UPSTREAM_BAD_RESPONSE');
    }
  });
});

describe('user list columns', () => {
  const members = [
    { user_id: 9, email: 'b@x', full_name: 'B', is_active: true, date_joined: '2020-01-01T00:00:00+00:00', role: 400 },
    { user_id: 3, email: 'a@x', is_bot: true, is_owner: false, avatar_version: 2, delivery_email: 'd@y', timezone: 'UTC' },
    { user_id: 5, email: 'b@x', is_active: false },
    { user_id: 'x', email: 'bad@x' },
  ];

  it('packs every member field and reads it back', () => {
    for (const row of members) {
      const m = memberOf(row);
      if (m) expect(unpackMember(packMember(m))).toEqual(m);
    }
  });

  it('orders members by id; rows rebuild the same columns (S1); the worker gives the same', async () => {
    const body = bytes({ members });
    const c = readUserList(body);
    expect([...c.ids]).toEqual([3, 5, 9]);
    expect(c.joined[2]).toBe(1_577_836_800);
    expect(Number.isNaN(c.joined[0])).toBe(true);
    expect(userColumnsFromRows(c.rows)).toEqual(c);
    expect(await pool.userList(Buffer.from(body))).toEqual(c);
    expect(await pool.userRows(c.rows)).toEqual(c);
  });

  it('answers by email and by id from the compact directory; an email picks its active user (X10)', async () => {
    const c = readUserList(bytes({ members }));
    const d = await Directory.of(c, 7);
    expect(d.idOf('b@x')).toBe(9);
    expect(emailPicks(c, [1, 2])).toBe(2);
    expect(emailPicks(c, [2, 1])).toBe(2);
    expect(d.ambiguousEmails).toEqual(new Set(['b@x']));
    expect(d.idOf('a@x')).toBe(3);
    expect(d.idOf('nobody@x')).toBeUndefined();
    expect(d.member(3)).toEqual(memberOf(members[1]));
    expect(d.member(4)).toBeUndefined();
    expect(d.dateJoinedOf(9)).toBe(1_577_836_800);
    expect(d.dateJoinedOf(3)).toBeUndefined();
    expect([...d.userIds()]).toEqual([3, 5, 9]);
    expect(d.fetchedAt).toBe(7);
    expect(d.bytes).toBeGreaterThan(c.rows.length);
  });
});

describe('the parse workers (X2)', () => {
  it('run with the young generation they are given, and end once idle for idleExitMs', async () => {
    const idlePool = new ParsePool({ workers: 1, inlineBelowBytes: 0, idleExitMs: 200, youngGenerationMb: 8 });
    try {
      const body = bytes({ members: [{ user_id: 1, email: 'a@x' }] });
      expect((await idlePool.userList(Buffer.from(body))).ids[0]).toBe(1);
      expect(idlePool.workerLimits().map((l) => l?.maxYoungGenerationSizeMb)).toEqual([8]);
      // Work within idleExitMs keeps the same worker.
      await new Promise((r) => setTimeout(r, 50));
      expect((await idlePool.userList(Buffer.from(body))).ids[0]).toBe(1);
      expect(idlePool.workerLimits()).toHaveLength(1);
      await new Promise((r) => setTimeout(r, 600));
      expect(idlePool.workerLimits()).toEqual([]);
      // The next large answer starts one again.
      expect((await idlePool.userList(Buffer.from(body))).ids[0]).toBe(1);
      expect(idlePool.workerLimits()).toHaveLength(1);
    } finally {
      await idlePool.close();
    }
  });

  it('the shim runs its workers with a young generation of 8 MiB, ending after 10 s idle', () => {
    expect(PARSE_POOL.youngGenerationMb).toBe(8);
    expect(PARSE_POOL.idleExitMs).toBe(10_000);
  });
});
