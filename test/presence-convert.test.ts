import { describe, expect, it } from 'vitest';
import {
  legacyUserToModern,
  limitLegacyHistory,
  oldSlimToModern,
  exactSlimToModern,
  presenceEra,
  toModern,
} from '../src/presence/convert.js';
import { parseJsonInt, parsePresenceRequest, upstreamWillReject, wantsModern } from '../src/presence/params.js';
import { historyCutoff } from '../src/presence/ledger.js';
import { Params } from '../src/http/body.js';
import { ShimError } from '../src/http/errors.js';

/**
 * The pure presence conversions (P2): each era's upstream entry to the modern one, and the
 * presence parameters read as a modern server reads them (E3, P1, P11).
 */

describe('presence conversion per era (P2)', () => {
  it('maps feature levels to eras', () => {
    expect([0, 24, 25, 65, 156, 177, 178, 185, 237].map(presenceEra)).toEqual([
      'legacy',
      'legacy',
      'old-slim',
      'old-slim',
      'old-slim',
      'old-slim',
      'exact-slim',
      'exact-slim',
      'exact-slim',
    ]);
  });

  // zulip-server.md §10.1: two clients for one user, 2.1–6.x.
  const twoClients = {
    aggregated: { client: 'ZulipMobile', status: 'idle', timestamp: 1656958530 },
    website: { client: 'website', status: 'active', timestamp: 1656958400, pushable: false },
    ZulipMobile: { client: 'ZulipMobile', status: 'idle', timestamp: 1656958530, pushable: true },
  };

  it.each([
    [
      'two clients: active from the active row, idle = newest report',
      twoClients,
      undefined,
      { active_timestamp: 1656958400, idle_timestamp: 1656958530 },
    ],
    [
      'only idle reports: active is date_joined (what a modern server sends)',
      {
        aggregated: { client: 'website', status: 'idle', timestamp: 500 },
        website: { client: 'website', status: 'idle', timestamp: 500, pushable: false },
      },
      100,
      { active_timestamp: 100, idle_timestamp: 500 },
    ],
    [
      'only idle reports, date_joined unknown: 0',
      { website: { client: 'website', status: 'idle', timestamp: 500, pushable: false } },
      undefined,
      { active_timestamp: 0, idle_timestamp: 500 },
    ],
    [
      'aggregated status is not a client report of activity',
      {
        aggregated: { client: 'website', status: 'active', timestamp: 700 },
        website: { client: 'website', status: 'idle', timestamp: 700, pushable: false },
      },
      5,
      { active_timestamp: 5, idle_timestamp: 700 },
    ],
    [
      'float timestamps become integers',
      { website: { client: 'website', status: 'active', timestamp: 700.9 } },
      undefined,
      { active_timestamp: 700, idle_timestamp: 700 },
    ],
    ['garbage gives nothing', { website: 'x' }, undefined, undefined],
    ['not an object', 42, undefined, undefined],
  ])('legacy 2.1–6.x: %s', (_name, entry, joined, expected) => {
    expect(legacyUserToModern(entry, joined)).toEqual(expected);
  });

  it.each([
    // zulip-server.md §10.2, 3.0–6.x: keys may be missing; idle meant "newest idle report".
    [
      'both keys, active newer than idle',
      { active_timestamp: 1594825400, idle_timestamp: 1594825300 },
      undefined,
      { active_timestamp: 1594825400, idle_timestamp: 1594825400 },
    ],
    ['idle only', { idle_timestamp: 1594825300 }, 1500000000, { active_timestamp: 1500000000, idle_timestamp: 1594825300 }],
    ['active only', { active_timestamp: 1594825440 }, undefined, { active_timestamp: 1594825440, idle_timestamp: 1594825440 }],
    ['neither', {}, undefined, undefined],
  ])('slim 3.0–6.x: %s', (_name, entry, joined, expected) => {
    expect(oldSlimToModern(entry, joined)).toEqual(expected);
  });

  it('slim 7.0–8.x is exact', () => {
    expect(exactSlimToModern({ active_timestamp: 1656958520, idle_timestamp: 1656958530 }, undefined)).toEqual({
      active_timestamp: 1656958520,
      idle_timestamp: 1656958530,
    });
  });

  it('keys legacy answers by user id through the realm map and reports unknown emails', () => {
    const users = {
      idOf: (e: string) => ({ 'iago@zulip.com': 5 })[e],
      dateJoinedOf: () => 1,
    };
    const out = toModern('legacy', { 'iago@zulip.com': twoClients, 'new@zulip.com': twoClients }, users);
    expect([...out.presences]).toEqual([[5, { active_timestamp: 1656958400, idle_timestamp: 1656958530 }]]);
    expect(out.unknownEmails).toEqual(['new@zulip.com']);
  });

  it('limits legacy answers by history_limit_days (P12)', () => {
    const day = 86_400;
    const p = {
      a: { website: { client: 'website', status: 'active', timestamp: 90 * day } },
      b: { website: { client: 'website', status: 'idle', timestamp: 10 * day } },
    };
    expect(Object.keys(limitLegacyHistory(p, historyCutoff(20, 100 * day)!))).toEqual(['a']);
    expect(Object.keys(limitLegacyHistory(p, historyCutoff(0, 100 * day)!))).toEqual([]);
    expect(Object.keys(limitLegacyHistory(p, historyCutoff(365, 100 * day)!))).toEqual(['a', 'b']);
  });
});

describe('presence parameters (E3, P1, P11)', () => {
  const err = (f: () => unknown) => {
    try {
      f();
    } catch (e) {
      return e instanceof ShimError ? [e.status, e.code, e.message] : e;
    }
    return undefined;
  };

  it.each([
    ['abc', [400, 'BAD_REQUEST', 'last_update_id is not valid JSON']],
    ['', [400, 'BAD_REQUEST', 'last_update_id is not valid JSON']],
    ['1.5', [400, 'BAD_REQUEST', 'last_update_id is not an integer']],
    ['1.0', [400, 'BAD_REQUEST', 'last_update_id is not an integer']],
    ['true', [400, 'BAD_REQUEST', 'last_update_id is not an integer']],
    ['"5"', [400, 'BAD_REQUEST', 'last_update_id is not an integer']],
    ['1e400', [400, 'BAD_REQUEST', 'last_update_id is not an integer']],
    ['null', [400, 'BAD_REQUEST', 'last_update_id is not an integer']],
  ])('last_update_id=%s is rejected like a modern server', (raw, expected) => {
    expect(err(() => parseJsonInt('last_update_id', raw))).toEqual(expected);
  });

  it.each([
    ['-1', -1],
    ['0', 0],
    ['-0', 0],
    [' 42 ', 42],
    ['9223372036854775808', 2 ** 63],
  ])('last_update_id=%s is an integer', (raw, expected) => {
    expect(parseJsonInt('last_update_id', raw)).toBe(expected);
  });

  const req = (entries: Array<[string, string]>) => parsePresenceRequest(new Params(entries));
  const rejects = (entries: Array<[string, string]>, fl = 0) => upstreamWillReject(req(entries), fl);

  it('reads JSON booleans only, as the upstream does', () => {
    expect(
      req([
        ['status', 'active'],
        ['ping_only', 'true'],
      ]).pingOnly,
    ).toBe(true);
    expect(
      rejects([
        ['status', 'active'],
        ['ping_only', 'True'],
      ]),
    ).toBe(true);
    expect(
      rejects([
        ['status', 'active'],
        ['ping_only', '1'],
      ]),
    ).toBe(true);
    expect(rejects([['status', 'bogus']])).toBe(true);
    expect(rejects([])).toBe(true);
    // 2.1 ignores slim_presence; 3.0+ validates it.
    expect(
      rejects(
        [
          ['status', 'idle'],
          ['slim_presence', 'maybe'],
        ],
        0,
      ),
    ).toBe(false);
    expect(
      rejects(
        [
          ['status', 'idle'],
          ['slim_presence', 'maybe'],
        ],
        25,
      ),
    ).toBe(true);
  });

  it('chooses the modern format iff last_update_id or slim_presence=true (P1)', () => {
    expect(wantsModern(req([['status', 'active']]))).toBe(false);
    expect(
      wantsModern(
        req([
          ['status', 'active'],
          ['slim_presence', 'false'],
        ]),
      ),
    ).toBe(false);
    expect(
      wantsModern(
        req([
          ['status', 'active'],
          ['slim_presence', 'true'],
        ]),
      ),
    ).toBe(true);
    expect(
      wantsModern(
        req([
          ['status', 'active'],
          ['last_update_id', '-1'],
        ]),
      ),
    ).toBe(true);
  });

  it('lists parameters nobody uses, sorted, and never the ones the shim handles (P11)', () => {
    expect(
      req([
        ['status', 'active'],
        ['zzz', '1'],
        ['last_update_id', '5'],
        ['history_limit_days', '3'],
        ['aaa', '2'],
      ]).ignored,
    ).toEqual(['aaa', 'zzz']);
  });

  it('takes the last of duplicated parameters, as Django does', () => {
    expect(
      req([
        ['status', 'active'],
        ['last_update_id', '5'],
        ['last_update_id', '7'],
      ]).lastUpdateId,
    ).toBe(7);
  });
});
