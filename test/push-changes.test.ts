import { describe, expect, it } from 'vitest';
import { CHANGES, checkedBundle, NOTIFICATION_CHANGES } from '../src/changes/index.js';
import { changesAbove, fillPayloads, kindOf, parseNotify, payloadsOf, pendingChanges, realmUrlOf } from '../src/push/notify.js';
import { objectEnds, spliceMembers } from '../src/push/splice.js';
import { notifyBody, REALM_URL } from './support/push-notifications.js';

/** M7: the registry's notification changes, and what the relay does with them to a notify body (pure). */

type Json = Record<string, unknown>;

describe("the registry's notification changes", () => {
  it('are realm_name (234, Zulip 8.0) and realm_url (257, Zulip 9.0), in the one registry, in order', () => {
    expect(NOTIFICATION_CHANGES.map((c) => [c.featureLevel, c.feature, c.notification.fields])).toEqual([
      [234, 'notification_realm_name', ['realm_name']],
      [257, 'notification_realm_url', ['realm_url']],
    ]);
    for (const c of NOTIFICATION_CHANGES) expect(CHANGES).toContain(c);
  });

  it('a bundle refuses a notification field introduced twice', () => {
    const twice = { featureLevel: 300, feature: 'again', notification: NOTIFICATION_CHANGES[1]!.notification };
    expect(() => checkedBundle([...NOTIFICATION_CHANGES, twice])).toThrow('notification field realm_url introduced twice');
  });

  it("realm_url is the payload's own realm_uri; nothing without one", () => {
    const url = NOTIFICATION_CHANGES[1]!.notification;
    expect(url.fill({ realm_uri: 'https://a.example.org' }, {})).toEqual({ realm_url: { value: 'https://a.example.org', source: 'rule' } });
    expect(url.fill({}, {})).toEqual({});
  });

  it("realm_name is the realm's from its server_settings; its host where they could not be had (fallback)", () => {
    const name = NOTIFICATION_CHANGES[0]!.notification;
    expect(name.fill({ realm_uri: 'https://a.example.org' }, { name: 'A team' })).toEqual({
      realm_name: { value: 'A team', source: 'lookup' },
    });
    expect(name.fill({ realm_uri: 'https://a.example.org:8443' }, {})).toEqual({
      realm_name: { value: 'a.example.org:8443', source: 'fallback' },
    });
    expect(name.fill({ realm_uri: 'not a url' }, {})).toEqual({});
  });
});

describe('a notify body (notify.ts)', () => {
  const payloads = (body: Json) => payloadsOf(body);

  it('its payloads are gcm_payload and apns_payload.custom.zulip; its kind the event', () => {
    for (const era of ['7.0', '8.0'] as const) {
      expect(payloads(notifyBody(era, 'message'))).toHaveLength(2);
      expect(kindOf(payloads(notifyBody(era, 'message')))).toBe('message');
      expect(kindOf(payloads(notifyBody(era, 'remove')))).toBe('remove');
      expect(realmUrlOf(payloads(notifyBody(era, 'remove')))).toBe(REALM_URL);
    }
    // An iOS payload of a message has no event, but its message ids.
    expect(kindOf([{ message_ids: [1] }])).toBe('message');
    expect(kindOf([{ event: 'test' }])).toBe('other');
    expect(payloadsOf({ gcm_payload: 'x', apns_payload: { custom: 3 } })).toEqual([]);
  });

  it('reads JSON objects only', () => {
    expect(parseNotify(Buffer.from('{"a":1}'))).toEqual({ a: 1 });
    for (const text of ['[1]', 'null', '"x"', 'user_id=1', '']) expect(parseNotify(Buffer.from(text))).toBeUndefined();
  });

  it('a 7.0 payload lacks both changes, an 8.0 one realm_url only; a field the server sent is never touched', () => {
    expect(pendingChanges(payloads(notifyBody('7.0', 'message'))).map((c) => c.featureLevel)).toEqual([234, 257]);
    expect(pendingChanges(payloads(notifyBody('8.0', 'message'))).map((c) => c.featureLevel)).toEqual([257]);
    const mixed = [{ realm_uri: REALM_URL, realm_name: 'As the server says' }];
    const added = fillPayloads(mixed, NOTIFICATION_CHANGES, { name: 'Looked up' });
    expect(mixed[0]).toEqual({ realm_uri: REALM_URL, realm_name: 'As the server says', realm_url: REALM_URL });
    expect(added).toEqual({ added: ['realm_url'], sources: { realm_url: 'rule' }, members: [[['realm_url', REALM_URL]]] });
  });

  it("applies only the changes above the upstream's level; all of them when it is not known", () => {
    const pending = [...NOTIFICATION_CHANGES];
    expect(changesAbove(pending, 185).map((c) => c.featureLevel)).toEqual([234, 257]);
    expect(changesAbove(pending, 237).map((c) => c.featureLevel)).toEqual([257]);
    expect(changesAbove(pending, 277)).toEqual([]);
    expect(changesAbove(pending, undefined)).toHaveLength(2);
  });

  it('says where each added value came from, a fallback winning', () => {
    const body = notifyBody('7.0', 'remove');
    const added = fillPayloads(payloads(body), NOTIFICATION_CHANGES, {});
    const members = [
      ['realm_name', 'chat.example.com'],
      ['realm_url', REALM_URL],
    ];
    expect(added).toEqual({
      added: ['realm_name', 'realm_url'],
      sources: { realm_name: 'fallback', realm_url: 'rule' },
      members: [members, members],
    });
    expect(payloads(body).map((p) => p.realm_name)).toEqual(['chat.example.com', 'chat.example.com']);
  });
});

describe('members written into a JSON text (splice.ts)', () => {
  it('finds the objects at their paths, whatever strings, arrays and spacing stand around them', () => {
    const text = '{"a":[{"b":{}}, {"b":{"x":"}{\\"]"}}],"c" : { "d" :{ } } ,"b":{"y":1}}';
    const ends = objectEnds(text, [['a', '1', 'b'], ['c', 'd'], ['b'], ['missing']]);
    expect(ends.get('["a","1","b"]')).toEqual({ at: text.indexOf('}}],'), empty: false });
    expect(ends.get('["c","d"]')).toEqual({ at: text.indexOf('} }'), empty: true });
    expect(ends.get('["b"]')).toEqual({ at: text.length - 2, empty: false });
    expect(ends.has('["missing"]')).toBe(false);
  });

  it('writes each addition last in its object, a comma where it has members, and nothing when an object is missing', () => {
    const text = '{"p":{"k":1.0},"q":{"r":{}}}';
    const out = spliceMembers(text, [
      {
        path: ['p'],
        members: [
          ['u', 'https://x'],
          ['n', 'é "q"'],
        ],
      },
      { path: ['q', 'r'], members: [['u', 2]] },
    ]);
    expect(out).toBe('{"p":{"k":1.0,"u":"https://x","n":"é \\"q\\""},"q":{"r":{"u":2}}}');
    expect(JSON.parse(out!)).toEqual({ p: { k: 1, u: 'https://x', n: 'é "q"' }, q: { r: { u: 2 } } });
    expect(spliceMembers(text, [{ path: ['nope'], members: [['u', 1]] }])).toBeUndefined();
    expect(spliceMembers(text, [{ path: ['nope'], members: [] }])).toBe(text);
  });
});
