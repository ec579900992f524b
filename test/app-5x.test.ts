import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { EMOJI_DATA_PATH, emojiDataOf } from '../src/changes/fl140-server-emoji-data-url.js';
import { planFlagsNarrow } from '../src/changes/fl155-flags-narrow.js';
import { mutedTopicsPerQueue } from '../src/changes/fl134-user-topics-register.js';
import { memoryBackend, QUEUE_STATE_TTL_MS, QueueStates } from '../src/app/queue-state.js';
import { adminRedis, describeRedis, keysUnder, REDIS_URL, suiteKeyPrefix } from './support/redis.js';
import { FormFields } from '../src/http/form-fields.js';
import { judgeAt } from './support/app-parsers.js';
import { EMOJI_CODES, startFake, type Era, type FakeZulip } from './support/fake-zulip.js';
import { APP_AGENT, APP_REGISTER, OTHER_AGENT } from './support/mobile-app.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * M2 on Zulip 5.x (docs/mobile-app.md §8): the rows a 5.0 upstream needs beyond 6.0's, each as
 * the upstream receives the app's request and as the app receives the answer.
 */

const APP = APP_AGENT;
const OTHER = OTHER_AGENT;
const judge = judgeAt('sweep-2436');

let fake: FakeZulip;
let shim: RunningShim;
afterEach(async () => {
  await shim?.close();
  await fake?.stop();
});

async function setup(era: Era, whole = false, failureTtlMs?: number) {
  fake = await startFake({ era, whole });
  shim = await startShim(fake.url, {
    app: { featureLevel: 277 },
    ...(failureTtlMs === undefined ? {} : { featureLevel: { failureTtlMs } }),
  });
}

const asApp = (r: request.Test, agent = APP) => r.set('User-Agent', agent).set('Authorization', fake.auth(10));
const register = (agent = APP) => asApp(request(shim.url).post('/api/v1/register'), agent).type('form').send(APP_REGISTER);
const fetchesOfEmojiCodes = () => fake.seen.filter((s) => s.url === '/static/generated/emoji/emoji_codes.json').length;

describe('fl140 server_emoji_data_url: the emoji names, from the upstream’s own emoji codes file', () => {
  it('builds code_to_names as a 6.0 server does: the canonical name first, then the aliases in the file’s order', () => {
    expect(emojiDataOf(EMOJI_CODES)).toEqual({
      code_to_names: { '1f44d': ['+1', 'thumbs_up', 'like'], '1f600': ['grinning', 'happy'], '1f419': ['octopus'] },
    });
    expect(emojiDataOf({ names: [] })).toBeUndefined();
    expect(emojiDataOf([])).toBeUndefined();
    expect(emojiDataOf({ codepoint_to_name: {}, name_to_codepoint: {} })).toBeUndefined();
  });

  it('on 5.0: register names the shim’s URL on the realm, which serves the map the app parses, read from the upstream once', async () => {
    await setup('5.0', true);
    const reg = await register();
    expect(reg.status).toBe(200);
    const url = new URL(reg.body.server_emoji_data_url);
    expect(url.origin).toBe(reg.body.realm_uri);
    expect(url.pathname).toBe(EMOJI_DATA_PATH);
    expect(reg.headers['x-zulip-compat-backfilled'] ?? '').toContain('server_emoji_data_url');
    expect(fetchesOfEmojiCodes()).toBe(1);

    // The app's fetch: unauthenticated, its User-Agent (lib/api/route/realm.dart fetchServerEmojiData).
    const data = await request(shim.url).get(EMOJI_DATA_PATH).set('User-Agent', APP);
    expect(data.status).toBe(200);
    expect(data.body).toEqual(emojiDataOf(EMOJI_CODES));
    expect(judge.parseProblems('ServerEmojiData', data.body)).toEqual([]);
    expect(data.headers.etag).toMatch(/^"[\w-]+"$/);
    const again = await request(shim.url).get(EMOJI_DATA_PATH).set('User-Agent', APP).set('If-None-Match', data.headers.etag!);
    expect(again.status).toBe(304);
    await register();
    expect(fetchesOfEmojiCodes()).toBe(1); // kept, not read again
    expect(fake.seen.some((s) => s.url.startsWith(EMOJI_DATA_PATH))).toBe(false);

    // Every other client: the path goes to the upstream, which (5.x) has no such file.
    const other = await request(shim.url).get(EMOJI_DATA_PATH).set('User-Agent', OTHER);
    expect(other.status).toBe(404);
    expect(fake.seen.filter((s) => s.url === EMOJI_DATA_PATH)).toHaveLength(1);
  });

  it('on 5.0 without the upstream’s file: register still names the URL (M3), which answers 502 and says why until the file can be had', async () => {
    await setup('5.0', true, 300);
    let missing = true;
    fake.override = (req, res) => {
      if (req.url !== '/static/generated/emoji/emoji_codes.json' || !missing) return false;
      res.writeHead(404, { 'content-type': 'text/html' }).end('<h1>Not Found</h1>');
      return true;
    };
    const reg = await register();
    expect(reg.status).toBe(200);
    expect(new URL(reg.body.server_emoji_data_url).pathname).toBe(EMOJI_DATA_PATH);
    const data = await request(shim.url).get(EMOJI_DATA_PATH).set('User-Agent', APP);
    expect(data.status).toBe(502);
    expect(data.body.result).toBe('error');
    // X2: asked again at once (anyone may, without credentials), the missing file is not fetched again.
    const asked = fetchesOfEmojiCodes();
    expect((await request(shim.url).get(EMOJI_DATA_PATH).set('User-Agent', APP)).status).toBe(502);
    expect(fetchesOfEmojiCodes()).toBe(asked);
    await new Promise((r) => setTimeout(r, 350)); // featureLevel.failureTtlMs
    expect(shim.logs.some((l) => l.includes("the upstream's static file could not be had") && l.includes('answered 404'))).toBe(true);
    // The app asks again (with backoff): once the file is there, the names are served.
    missing = false;
    const later = await request(shim.url).get(EMOJI_DATA_PATH).set('User-Agent', APP);
    expect(later.status).toBe(200);
    expect(later.body).toEqual(emojiDataOf(EMOJI_CODES));
  });

  it('on 6.0 (feature level 140 and up): the upstream’s own URL, and the path goes to the upstream', async () => {
    await setup('6.0', true);
    const reg = await register();
    expect(reg.body.server_emoji_data_url).toBeDefined();
    expect(reg.body.server_emoji_data_url).not.toContain(EMOJI_DATA_PATH);
    expect(fetchesOfEmojiCodes()).toBe(0);
    await request(shim.url).get(EMOJI_DATA_PATH).set('User-Agent', APP);
    expect(fake.seen.filter((s) => s.url === EMOJI_DATA_PATH)).toHaveLength(1);
  });
});

describe('fl155 POST /messages/flags/narrow on 5.x: as the app’s own _legacyMarkNarrowAsRead did', () => {
  const plan = (form: Record<string, string>) => planFlagsNarrow(new FormFields(new URLSearchParams(form).toString()));
  const markRead = (narrow: unknown[]) => ({
    anchor: 'oldest',
    include_anchor: 'false',
    num_before: '0',
    num_after: '1000',
    narrow: JSON.stringify([...narrow, { operator: 'is', operand: 'unread' }]),
    op: 'add',
    flag: 'read',
  });

  it.each([
    ['the whole feed', markRead([]), { kind: 'legacy', path: '/mark_all_as_read', form: {} }],
    [
      'a channel',
      markRead([{ operator: 'stream', operand: 7 }]),
      { kind: 'legacy', path: '/mark_stream_as_read', form: { stream_id: '7' } },
    ],
    [
      'a topic',
      markRead([
        { operator: 'stream', operand: 7 },
        { operator: 'topic', operand: 'lunch' },
      ]),
      { kind: 'legacy', path: '/mark_topic_as_read', form: { stream_id: '7', topic_name: 'lunch' } },
    ],
    [
      'a topic, legacy pairs',
      markRead([
        ['stream', 7],
        ['topic', 'lunch'],
      ]),
      { kind: 'legacy', path: '/mark_topic_as_read' },
    ],
    ['direct messages', markRead([{ operator: 'pm-with', operand: [11] }]), { kind: 'batch', op: 'add', flag: 'read' }],
    ['mentions', markRead([{ operator: 'is', operand: 'mentioned' }]), { kind: 'batch' }],
    ['a channel by name', markRead([{ operator: 'stream', operand: 'general' }]), { kind: 'batch' }],
    [
      'a channel, negated topic',
      markRead([
        { operator: 'stream', operand: 7 },
        { operator: 'topic', operand: 'x', negated: true },
      ]),
      { kind: 'batch' },
    ],
    [
      'unread from a message on',
      { anchor: '42', include_anchor: 'true', num_before: '0', num_after: '1000', narrow: '[]', op: 'remove', flag: 'read' },
      { kind: 'batch', op: 'remove' },
    ],
  ])('%s', (_what, form, expected) => {
    expect(plan(form)).toMatchObject(expected);
  });

  it('leaves the anchor out of a batch only where include_anchor is false and the anchor is a message id', () => {
    const base = { num_before: '0', num_after: '1000', narrow: '[]', op: 'remove', flag: 'read' };
    expect(plan({ ...base, anchor: '42', include_anchor: 'false' })).toMatchObject({ leaveOut: 42 });
    expect(plan({ ...base, anchor: '42' })).not.toHaveProperty('leaveOut');
    expect(plan({ ...base, anchor: 'oldest', include_anchor: 'false' })).not.toHaveProperty('leaveOut');
  });

  /** A 5.x upstream's messages, flags and legacy mark-as-read endpoints over `count` unread direct messages from user 11. */
  function messagesUpstream(count: number) {
    const all = Array.from({ length: count }, (_, i) => i + 1);
    const unread = new Set(all);
    const flagged: number[][] = [];
    const legacy: Array<{ path: string; form: Record<string, string> }> = [];
    const form = (body: Buffer) => Object.fromEntries(new URLSearchParams(body.toString('utf8')));
    const send = (res: ServerResponse, body: unknown) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    fake.override = (req: IncomingMessage, res: ServerResponse, body: Buffer) => {
      const [path, query = ''] = (req.url ?? '').split('?');
      if (req.method === 'GET' && path === '/api/v1/messages') {
        const q = new URLSearchParams(query);
        const narrow = JSON.parse(q.get('narrow') ?? '[]') as Array<{ operator: string; operand: unknown }>;
        expect(narrow[0]?.operator).toBe('pm-with'); // translated down
        const onlyUnread = narrow.some((t) => t.operator === 'is' && t.operand === 'unread');
        const anchor = q.get('anchor') === 'oldest' ? 0 : Number(q.get('anchor'));
        // 5.x ignores include_anchor: the anchor comes back whenever it matches.
        const ids = all.filter((id) => id >= anchor && (!onlyUnread || unread.has(id)));
        const found = ids[0] === anchor;
        const page = ids.slice(0, Number(q.get('num_after')) + (found ? 1 : 0));
        send(res, {
          result: 'success',
          msg: '',
          anchor,
          found_anchor: found,
          found_oldest: anchor === 0,
          found_newest: page.length === ids.length,
          history_limited: false,
          messages: page.map((id) => ({ id, type: 'private', flags: [] })),
        });
        return true;
      }
      if (req.method === 'POST' && path === '/api/v1/messages/flags') {
        const { messages, op } = form(body);
        const ids = JSON.parse(messages!) as number[];
        flagged.push(ids);
        const changed = ids.filter((id) => (op === 'add' ? unread.delete(id) : !unread.has(id) && unread.add(id)));
        send(res, { result: 'success', msg: '', messages: changed });
        return true;
      }
      if (req.method === 'POST' && path!.startsWith('/api/v1/mark_')) {
        legacy.push({ path: path!, form: form(body) });
        send(res, { result: 'success', msg: '' });
        return true;
      }
      return false;
    };
    return { unread, flagged, legacy };
  }

  const flagsNarrow = (form: Record<string, string>, agent = APP) =>
    asApp(request(shim.url).post('/api/v1/messages/flags/narrow'), agent).type('form').send(form);

  it('marks 2,500 unread direct messages read in the app’s batches of 1,000, each message once, the answers the app parses', async () => {
    await setup('5.0');
    const upstream = messagesUpstream(2500);
    // The app's loop (lib/widgets/actions.dart updateMessageFlagsStartingFromAnchor).
    let form = markRead([{ operator: 'dm', operand: [11] }]);
    const answers: Array<Record<string, unknown>> = [];
    for (let i = 0; i < 5; i++) {
      const r = await flagsNarrow(form);
      expect(r.status).toBe(200);
      expect(judge.parseProblems('UpdateMessageFlagsForNarrowResult', r.body)).toEqual([]);
      answers.push(r.body);
      if (r.body.found_newest) break;
      form = { ...form, anchor: String(r.body.last_processed_id), include_anchor: 'false' };
    }
    expect(answers.map((a) => [a.processed_count, a.updated_count, a.first_processed_id, a.last_processed_id, a.found_newest])).toEqual([
      [1000, 1000, 1, 1000, false],
      [1000, 1000, 1001, 2000, false],
      [500, 500, 2001, 2500, true],
    ]);
    expect(upstream.flagged.map((ids) => ids.length)).toEqual([1000, 1000, 500]);
    expect(new Set(upstream.flagged.flat()).size).toBe(2500); // the anchor of a later batch is not flagged again
    expect(upstream.unread.size).toBe(0);
    expect(fake.seen.filter((s) => s.url.startsWith('/api/v1/messages/flags/narrow'))).toEqual([]);
    const flags = fake.seen.find((s) => s.url === '/api/v1/messages/flags')!;
    expect(new URLSearchParams(flags.body.toString()).get('op')).toBe('add');
    expect(flags.headers.authorization).toBe(fake.auth(10));
  });

  it('marks 2,500 direct messages unread from the first on, the anchor of each later batch (which 5.x sends anyway) not again', async () => {
    await setup('5.0');
    const upstream = messagesUpstream(2500);
    upstream.unread.clear();
    let form: Record<string, string> = {
      anchor: '1',
      include_anchor: 'true',
      num_before: '0',
      num_after: '1000',
      narrow: JSON.stringify([{ operator: 'dm', operand: [11] }]),
      op: 'remove',
      flag: 'read',
    };
    const counts: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await flagsNarrow(form);
      expect(judge.parseProblems('UpdateMessageFlagsForNarrowResult', r.body)).toEqual([]);
      counts.push(r.body.processed_count);
      if (r.body.found_newest) break;
      form = { ...form, anchor: String(r.body.last_processed_id), include_anchor: 'false' };
    }
    expect(counts).toEqual([1001, 1000, 499]); // the first batch holds its anchor and 1,000 after it
    expect(upstream.flagged.flat()).toHaveLength(2500);
    expect(upstream.unread.size).toBe(2500);
  });

  it.each([
    ['the whole feed', [], '/api/v1/mark_all_as_read', {}],
    ['a channel', [{ operator: 'channel', operand: 7 }], '/api/v1/mark_stream_as_read', { stream_id: '7' }],
    [
      'a topic',
      [
        { operator: 'channel', operand: 7 },
        { operator: 'topic', operand: 'lunch' },
      ],
      '/api/v1/mark_topic_as_read',
      { stream_id: '7', topic_name: 'lunch' },
    ],
  ])('marks %s read by the legacy endpoint, in one answer the app stops at', async (_what, narrow, path, sent) => {
    await setup('5.0');
    const upstream = messagesUpstream(3);
    const r = await flagsNarrow(markRead(narrow));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ processed_count: 0, updated_count: 0, found_oldest: true, found_newest: true });
    expect(judge.parseProblems('UpdateMessageFlagsForNarrowResult', r.body)).toEqual([]);
    expect(upstream.legacy).toEqual([{ path, form: sent }]);
  });

  it('passes the upstream’s refusal on as it came', async () => {
    await setup('5.0');
    fake.override = (req, res) => {
      if (!req.url?.startsWith('/api/v1/mark_stream_as_read')) return false;
      res.writeHead(400, { 'content-type': 'application/json' }).end('{"result":"error","msg":"Invalid stream ID","code":"BAD_REQUEST"}');
      return true;
    };
    const r = await flagsNarrow(markRead([{ operator: 'channel', operand: 99 }]));
    expect(r.status).toBe(400);
    expect(r.body.msg).toBe('Invalid stream ID');
  });

  it('GET /messages with include_anchor=false: the anchor the 5.x upstream sends anyway is left out, for the app only', async () => {
    await setup('5.0');
    messagesUpstream(0);
    fake.override = (req, res) => {
      if (!req.url?.startsWith('/api/v1/messages?')) return false;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          result: 'success',
          msg: '',
          anchor: 5,
          found_anchor: true,
          found_oldest: false,
          found_newest: true,
          history_limited: false,
          messages: [5, 6, 7].map((id) => ({ id })),
        }),
      );
      return true;
    };
    const path = '/api/v1/messages?anchor=5&include_anchor=false&num_before=0&num_after=100&narrow=%5B%5D';
    const app = await asApp(request(shim.url).get(path));
    expect(app.body.messages.map((m: { id: number }) => m.id)).toEqual([6, 7]);
    expect(app.body.found_anchor).toBe(false);
    const other = await asApp(request(shim.url).get(path), OTHER);
    expect(other.body.messages.map((m: { id: number }) => m.id)).toEqual([5, 6, 7]);
    const included = await asApp(request(shim.url).get(path.replace('include_anchor=false', 'include_anchor=true')));
    expect(included.body.messages.map((m: { id: number }) => m.id)).toEqual([5, 6, 7]);
  });

  it('on 6.0 goes to the upstream’s own endpoint', async () => {
    await setup('6.0');
    await flagsNarrow(markRead([{ operator: 'channel', operand: 7 }]));
    expect(fake.seen.filter((s) => s.url === '/api/v1/messages/flags/narrow')).toHaveLength(1);
  });
});

describe('fl134 user_topic events on 5.x: muted_topics events diffed against the queue’s last list', () => {
  const REGISTER = {
    result: 'success',
    msg: '',
    queue_id: 'queue-muted',
    last_event_id: -1,
    zulip_version: '5.0',
    zulip_feature_level: 122,
    realm_uri: 'https://chat.example.com',
    subscriptions: [
      { name: 'Denmark', stream_id: 1 },
      { name: 'Verona', stream_id: 5 },
    ],
    muted_topics: [['Denmark', 'lunch', 100]],
  };
  /** What the upstream sends after each last_event_id (the same again when a poll is repeated). */
  const EVENTS: Record<string, unknown[]> = {
    '-1': [
      {
        id: 0,
        type: 'muted_topics',
        muted_topics: [
          ['Denmark', 'lunch', 100],
          ['Verona', 'plans', 200],
        ],
      },
    ],
    '0': [
      { id: 1, type: 'stream', op: 'update', stream_id: 5, name: 'Verona', property: 'name', value: 'Venice' },
      { id: 2, type: 'muted_topics', muted_topics: [['Venice', 'plans', 200]] },
    ],
    '2': [{ id: 3, type: 'heartbeat' }],
  };
  const muted = (streamId: number, topic: string, when: number, id: number) => ({
    type: 'user_topic',
    stream_id: streamId,
    topic_name: topic,
    last_updated: when,
    visibility_policy: 1,
    id,
  });

  it('builds from register the list by channel id, then each event’s changes, a renamed channel’s topics kept', () => {
    const state = mutedTopicsPerQueue.start(structuredClone(REGISTER))!;
    expect(state).toEqual({ ids: { Denmark: 1, Verona: 5 }, muted: [[1, 'lunch', 100]] });
    const first = mutedTopicsPerQueue.up(structuredClone(EVENTS['-1']![0]) as Record<string, unknown>, state, 1000);
    expect(first).toEqual([muted(5, 'plans', 200, 0), EVENTS['-1']![0]]);
    expect(mutedTopicsPerQueue.up(structuredClone(EVENTS['0']![0]) as Record<string, unknown>, state, 1000)).toBeUndefined();
    const second = mutedTopicsPerQueue.up(structuredClone(EVENTS['0']![1]) as Record<string, unknown>, state, 1000);
    expect(second).toEqual([{ ...muted(1, 'lunch', 1000, 2), visibility_policy: 0 }, EVENTS['0']![1]]);
    // A channel the queue never named: its topics are left out, and nobody is unmuted for it.
    const unknown = {
      id: 4,
      type: 'muted_topics',
      muted_topics: [
        ['Venice', 'plans', 200],
        ['Elsewhere', 'x', 300],
      ],
    };
    expect(mutedTopicsPerQueue.up(unknown, state, 1000)).toEqual([unknown]);
  });

  it('a repeated poll (an answer lost) gets the same events again; an acknowledged one moves the list on', async () => {
    const states = new QueueStates(memoryBackend());
    await states.start('q', mutedTopicsPerQueue.start(structuredClone(REGISTER))!);
    let now = 1000;
    const poll = async (last: number) => {
      const events = structuredClone(EVENTS[String(last)]!);
      await states.poll('q', last, events, mutedTopicsPerQueue, now++);
      return events;
    };
    const once = await poll(-1);
    expect(await poll(-1)).toEqual(once);
    expect(once.filter((e) => (e as { type: string }).type === 'user_topic')).toHaveLength(1);
    const next = await poll(0);
    expect(next.filter((e) => (e as { type: string }).type === 'user_topic')).toEqual([
      { ...muted(1, 'lunch', 1002, 2), visibility_policy: 0 },
    ]);
    // Again seconds later (on another replica, say): the same bytes, the unmute as first seen.
    expect(await poll(0)).toEqual(next);
    expect(await poll(2)).toEqual(EVENTS['2']);
  });

  it('expires with the queue: a state not polled within its time to live is gone, and the events go on as they came', async () => {
    const states = new QueueStates(memoryBackend(), 50);
    await states.start('q', mutedTopicsPerQueue.start(structuredClone(REGISTER))!);
    await new Promise((r) => setTimeout(r, 120));
    const events = structuredClone(EVENTS['-1']!);
    expect(await states.poll('q', -1, events, mutedTopicsPerQueue, 1000)).toBe(false);
    expect(events).toEqual(EVENTS['-1']);
    expect(QUEUE_STATE_TTL_MS).toBeGreaterThan(10 * 60_000); // Zulip's idle queue timeout, renewed by each poll
  });

  /** A 5.0 upstream whose register and events answer as scripted (REGISTER, EVENTS by last_event_id). */
  function scripted(f: FakeZulip) {
    f.override = (req, res) => {
      const [path, query = ''] = (req.url ?? '').split('?');
      const send = (body: unknown) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body));
      if (req.method === 'POST' && path === '/api/v1/register') {
        send(REGISTER);
        return true;
      }
      if (req.method === 'GET' && path === '/api/v1/events') {
        send({ result: 'success', msg: '', events: EVENTS[new URLSearchParams(query).get('last_event_id') ?? ''] ?? [] });
        return true;
      }
      return false;
    };
  }
  // Replicas behind one name: the realm is the Host the app asks for, whichever replica answers.
  const poll = (s: RunningShim, last: number, agent = APP) =>
    asApp(request(s.url).get(`/api/v1/events?queue_id=queue-muted&last_event_id=${last}`), agent)
      .set('Host', 'chat.example.com')
      .then((r) => r.body.events as Array<Record<string, unknown>>);
  const registerAt = (s: RunningShim) =>
    asApp(request(s.url).post('/api/v1/register')).set('Host', 'chat.example.com').type('form').send(APP_REGISTER);
  const userTopics = (events: Array<Record<string, unknown>>) => events.filter((e) => e.type === 'user_topic');

  it('in one shim without a shared store: the app gets user_topic events, every other client the events as they came', async () => {
    await setup('5.0');
    scripted(fake);
    await registerAt(shim);
    const events = await poll(shim, -1);
    expect(userTopics(events)).toEqual([muted(5, 'plans', 200, 0)]);
    expect(judge.parseProblems('GetEventsResult', { result: 'success', msg: '', events })).toEqual([]);
    expect(await poll(shim, -1, OTHER)).toEqual(EVENTS['-1']);
  });

  describeRedis('two replicas on one Redis', () => {
    const prefix = suiteKeyPrefix();
    const replicas: RunningShim[] = [];
    afterEach(async () => {
      for (const r of replicas.splice(0)) await r.close();
    });

    it('serve one queue alike: registered on one, polled on either, the state shared, expiring with the queue', async () => {
      fake = await startFake({ era: '5.0' });
      scripted(fake);
      for (let i = 0; i < 2; i++)
        replicas.push(await startShim(fake.url, { app: { featureLevel: 277 }, store: { redisUrl: REDIS_URL, keyPrefix: prefix } }));
      const [a, b] = replicas as [RunningShim, RunningShim];
      const reg = await registerAt(a);
      expect(reg.body.user_topics).toEqual([{ stream_id: 1, topic_name: 'lunch', last_updated: 100, visibility_policy: 1 }]);
      expect(userTopics(await poll(b, -1))).toEqual([muted(5, 'plans', 200, 0)]);
      expect(userTopics(await poll(a, -1))).toEqual([muted(5, 'plans', 200, 0)]); // the same poll again, on the other replica
      const second = userTopics(await poll(a, 0));
      expect(second).toHaveLength(1);
      expect(second[0]).toMatchObject({ stream_id: 1, topic_name: 'lunch', visibility_policy: 0, id: 2 });
      expect(userTopics(await poll(b, 0))).toEqual(second);

      const admin = adminRedis();
      try {
        const keys = (await keysUnder(admin, prefix)).filter((k) => k.includes('app_queue'));
        expect(keys).toHaveLength(1);
        expect(keys[0]).not.toContain('queue-muted'); // the queue id only hashed, with the realm
        const ttl = await admin.pttl(keys[0]!);
        expect(ttl).toBeGreaterThan(QUEUE_STATE_TTL_MS - 60_000);
        expect(ttl).toBeLessThanOrEqual(QUEUE_STATE_TTL_MS);
      } finally {
        admin.disconnect();
      }
    });
  });
});
