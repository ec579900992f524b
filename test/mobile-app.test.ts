import { once } from 'node:events';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { isTranslatedAppRequest } from '../src/app/handler.js';
import { presentedLevel } from '../src/app/presented.js';
import { appProbe } from '../src/checks.js';
import { translateRequest } from '../src/changes/app-parts.js';
import { FormFields } from '../src/http/form-fields.js';
import { TOPIC_WILDCARD_REFUSAL } from '../src/changes/fl224-topic-wildcard.js';
import { USER_TOPIC_POLICY_REFUSAL } from '../src/changes/fl170-user-topics.js';
import { eraEvents } from './support/era-answers.js';
import { startFake, type Era, type FakeZulip } from './support/fake-zulip.js';
import { APP_AGENT, APP_REGISTER, OTHER_AGENT } from './support/mobile-app.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * M1, M2 (docs/mobile-app.md): with app.featureLevel, the mobile app is shown that level in
 * server_settings and register, and its requests reach a 7.x or 8.x upstream in that server's
 * form; every other client, and an older upstream, see the real level and go through untouched.
 */

const APP = APP_AGENT;
const OTHER = OTHER_AGENT;

let fake: FakeZulip;
let shim: RunningShim;
afterEach(async () => {
  await shim?.close();
  await fake?.stop();
});

async function setup(era: Era, featureLevel: number | null = 277) {
  fake = await startFake({ era });
  shim = await startShim(fake.url, { app: featureLevel === null ? {} : { featureLevel } });
}

const get = (path: string, agent: string) => request(shim.url).get(path).set('User-Agent', agent).set('Authorization', fake.auth(10));
const post = (path: string, agent: string, form: Record<string, string>) =>
  request(shim.url).post(path).set('User-Agent', agent).set('Authorization', fake.auth(10)).type('form').send(form);
const lastSeen = (path: string) => fake.seen.filter((s) => s.url.split('?')[0] === path).at(-1)!;

describe('M1: the level the app is shown', () => {
  it('is app.featureLevel in server_settings and register for the app on 8.0, and says both levels', async () => {
    await setup('8.0');
    const app = await get('/api/v1/server_settings', APP);
    expect(app.body.zulip_feature_level).toBe(277);
    expect(app.body.zulip_compat_shim.app).toEqual({ presented_feature_level: 277, feature_level: 237 });
    expect(app.body.zulip_version).toBe((await get('/api/v1/server_settings', OTHER)).body.zulip_version);
    const reg = await post('/api/v1/register', APP, { fetch_event_types: '["realm"]' });
    expect(reg.status).toBe(200);
    expect(reg.body.zulip_feature_level).toBe(277);
  });

  it.each(['7.0', '8.0'] as const)(
    'on %s, the app’s own register (every event type, its capabilities) and a presence poll after it work',
    async (era) => {
      await setup(era);
      const reg = await post('/api/v1/register', APP, APP_REGISTER);
      expect(reg.status).toBe(200);
      expect(reg.body.zulip_feature_level).toBe(277);
      expect(typeof reg.body.queue_id).toBe('string');
      expect(typeof reg.body.presence_last_update_id).toBe('number');
      const poll = await post('/api/v1/users/me/presence', APP, {
        status: 'active',
        last_update_id: String(reg.body.presence_last_update_id),
        history_limit_days: '14',
      });
      expect(poll.status).toBe(200);
      expect(poll.body.presence_last_update_id).toBeGreaterThanOrEqual(reg.body.presence_last_update_id);
    },
  );

  it('is the real level for every other client, and the answers are as without the flag', async () => {
    await setup('8.0');
    const other = await get('/api/v1/server_settings', OTHER);
    expect(other.body.zulip_feature_level).toBe(237);
    expect(other.body.zulip_compat_shim.app).toBeUndefined();
    const reg = await post('/api/v1/register', OTHER, { fetch_event_types: '["realm"]' });
    expect(reg.body.zulip_feature_level).toBe(237);
  });

  it.each([
    ['7.0', 185],
    ['6.0', 156],
    ['5.0', 122],
  ] as const)('is app.featureLevel on %s too', async (era, real) => {
    await setup(era);
    const app = await get('/api/v1/server_settings', APP);
    expect(app.body.zulip_feature_level).toBe(277);
    expect(app.body.zulip_compat_shim.app).toEqual({ presented_feature_level: 277, feature_level: real });
    expect(shim.logs.filter((l) => l.includes('cannot be served'))).toEqual([]);
  });

  it('is the real level below 5.0, which the shim cannot serve (as without the shim)', async () => {
    await setup('4.0');
    const old = await get('/api/v1/server_settings', APP);
    expect(old.body.zulip_feature_level).toBe(old.body.zulip_compat_shim.app.feature_level);
    expect(old.body.zulip_feature_level).toBeLessThan(122);
    // Not judged at start-up here (the test's shim makes no start-up check): said when found, once.
    await get('/api/v1/server_settings', APP);
    await request(shim.url).get('/api/v1/server_settings').set('User-Agent', APP).set('Host', 'alias.example.com');
    const said = shim.logs.filter((l) => l.includes('app: --app-feature-level 277 cannot be served by a server at feature level'));
    expect(said).toHaveLength(1);
    expect(JSON.parse(said[0]!)).toMatchObject({ level: 40, featureLevel: old.body.zulip_feature_level, appFeatureLevel: 277 });
  });

  it.each([
    [277, 237, 277],
    [277, 185, 277],
    [277, 184, 277],
    [277, 156, 277],
    [277, 155, 277],
    [277, 122, 277],
    [277, 121, 121],
    [277, 277, 277],
    [277, 300, 300],
    [250, 237, 250],
  ])('shown %d on a server at %d → %d', (asked, real, shown) => {
    expect(presentedLevel(asked, real)).toBe(shown);
  });
});

describe('M2: the app’s requests in the 8.0 server’s form', () => {
  it.each([
    ['GET', '/api/v1/messages', true],
    ['POST', '/api/v1/messages', true],
    ['PATCH', '/api/v1/messages/5', true],
    ['POST', '/json/typing', true],
    ['HEAD', '/api/v1/messages', false],
    ['DELETE', '/api/v1/messages/5', false],
    ['PUT', '/api/v1/messages/5', false],
    ['OPTIONS', '/api/v1/messages', false],
    ['GET', '/api/v1/messages/5', true],
    ['GET', '/api/v1/events', true],
    ['DELETE', '/api/v1/events', false],
    ['GET', '/api/v1/streams', false],
    ['POST', '/api/v1/user_topics', true],
    ['POST', '/api/v1/fetch_api_key', true],
    ['GET', '/api/v1/user_topics', false],
  ] as const)('the app’s %s %s reaches the translator: %s (it sends only GET, POST and PATCH on)', (method, path, taken) => {
    const app = { featureLevel: 277, userAgents: ['ZulipFlutter'] };
    expect(isTranslatedAppRequest(app, { method, headers: { 'user-agent': APP } }, path)).toBe(taken);
    expect(isTranslatedAppRequest(app, { method, headers: { 'user-agent': OTHER } }, path)).toBe(false);
  });

  it('narrows: channel → stream, channels → streams, with left out (GET /messages, POST /messages/flags/narrow)', async () => {
    await setup('8.0');
    const narrow = JSON.stringify([
      { operator: 'channel', operand: 7 },
      { operator: 'topic', operand: 'lunch' },
      { operator: 'with', operand: 1234 },
    ]);
    await get(`/api/v1/messages?anchor=newest&num_before=50&narrow=${encodeURIComponent(narrow)}`, APP);
    const seen = new URL(lastSeen('/api/v1/messages').url, 'http://x').searchParams;
    expect(JSON.parse(seen.get('narrow')!)).toEqual([
      { operator: 'stream', operand: 7 },
      { operator: 'topic', operand: 'lunch' },
    ]);
    expect(seen.get('anchor')).toBe('newest');
    await post('/api/v1/messages/flags/narrow', APP, {
      narrow: JSON.stringify([{ operator: 'channels', operand: 'public' }]),
      op: 'add',
      flag: 'read',
    });
    const form = new URLSearchParams(lastSeen('/api/v1/messages/flags/narrow').body.toString());
    expect(JSON.parse(form.get('narrow')!)).toEqual([{ operator: 'streams', operand: 'public' }]);
    expect(form.get('flag')).toBe('read');
  });

  it('messages and typing: type channel → stream', async () => {
    await setup('8.0');
    await post('/api/v1/messages', APP, { type: 'channel', to: '7', topic: 'lunch', content: 'hi', read_by_sender: 'true' });
    const sent = new URLSearchParams(lastSeen('/api/v1/messages').body.toString());
    expect(Object.fromEntries(sent)).toEqual({ type: 'stream', to: '7', topic: 'lunch', content: 'hi', read_by_sender: 'true' });
    await post('/api/v1/typing', APP, { type: 'channel', stream_id: '7', topic: 'lunch', op: 'start' });
    expect(new URLSearchParams(lastSeen('/api/v1/typing').body.toString()).get('type')).toBe('stream');
  });

  it('messages and edits: @**channel** → @**stream** outside code (before 247)', async () => {
    await setup('8.0');
    const content = 'lunch @**channel**\n```\n@**channel**\n```';
    await post('/api/v1/messages', APP, { type: 'channel', to: '7', topic: 'lunch', content });
    expect(new URLSearchParams(lastSeen('/api/v1/messages').body.toString()).get('content')).toBe(
      'lunch @**stream**\n```\n@**channel**\n```',
    );
    await request(shim.url)
      .patch('/api/v1/messages/42')
      .set('User-Agent', APP)
      .set('Authorization', fake.auth(10))
      .type('form')
      .send({ content: 'now @_**channel**', prev_content_sha256: 'abc' });
    const edit = lastSeen('/api/v1/messages/42');
    expect(edit.method).toBe('PATCH');
    expect(Object.fromEntries(new URLSearchParams(edit.body.toString()))).toEqual({
      content: 'now @_**stream**',
      prev_content_sha256: 'abc',
    });
    await request(shim.url)
      .patch('/api/v1/messages/42')
      .set('User-Agent', OTHER)
      .set('Authorization', fake.auth(10))
      .type('form')
      .send({ content: '@**channel**' });
    expect(lastSeen('/api/v1/messages/42').body.toString()).toBe('content=%40%2A%2Achannel%2A%2A'); // as sent
  });

  it('on 7.0 also: typing names the channel by `to`, and a sent message carries the name the server knows the app by', async () => {
    await setup('7.0');
    await post('/api/v1/typing', APP, { type: 'channel', stream_id: '7', topic: 'lunch', op: 'start' });
    expect(Object.fromEntries(new URLSearchParams(lastSeen('/api/v1/typing').body.toString()))).toEqual({
      type: 'stream',
      to: '[7]',
      topic: 'lunch',
      op: 'start',
    });
    await post('/api/v1/messages', APP, { type: 'channel', to: '7', topic: 'lunch', content: 'hi', read_by_sender: 'true' });
    expect(lastSeen('/api/v1/messages').headers['user-agent']).toBe('ZulipMobile/flutter');
    await post('/api/v1/messages', OTHER, { type: 'stream', to: '7', topic: 'lunch', content: 'hi' });
    expect(lastSeen('/api/v1/messages').headers['user-agent']).toBe(OTHER);
  });

  it('through handle() with a next (an app with its own proxy): the app’s changed requests are translated, not handed to next', async () => {
    await setup('8.0');
    const http = await import('node:http');
    let nexted = 0;
    const front = http.createServer((req, res) =>
      shim.shim.handle(req, res, () => {
        nexted++;
        res.writeHead(204).end();
      }),
    );
    await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(front.address() as import('node:net').AddressInfo).port}`;
      const r = await request(url)
        .post('/api/v1/messages')
        .set('Host', 'chat.example.com')
        .set('User-Agent', APP)
        .set('Authorization', fake.auth(10))
        .type('form')
        .send({ type: 'channel', to: '7', topic: 't', content: 'x' });
      expect(r.status).not.toBe(204);
      expect(new URLSearchParams(lastSeen('/api/v1/messages').body.toString()).get('type')).toBe('stream');
      await request(url).get('/api/v1/streams').set('User-Agent', APP).set('Authorization', fake.auth(10));
      expect(nexted).toBe(1); // anything else is the app's own proxy's
    } finally {
      await new Promise((r) => front.close(r));
    }
  });

  it('leaves every other client’s requests, and the app’s without the flag, exactly as sent', async () => {
    await setup('8.0');
    const narrow = JSON.stringify([{ operator: 'channel', operand: 7 }]);
    const path = `/api/v1/messages?narrow=${encodeURIComponent(narrow)}`;
    await get(path, OTHER);
    expect(lastSeen('/api/v1/messages').url).toBe(path);
    await post('/api/v1/messages', OTHER, { type: 'channel', to: '7', topic: 't', content: 'x' });
    expect(lastSeen('/api/v1/messages').body.toString()).toBe('type=channel&to=7&topic=t&content=x');
    await shim.close();
    await fake.stop();
    await setup('8.0', null); // the flag off
    await post('/api/v1/messages', APP, { type: 'channel', to: '7', topic: 't', content: 'x' });
    expect(lastSeen('/api/v1/messages').body.toString()).toBe('type=channel&to=7&topic=t&content=x');
  });

  it.each([
    ['POST /messages', 'type=channel', 247, 'type=stream'],
    ['POST /messages', 'type=channel', 248, 'type=channel'],
    ['POST /typing', 'type=direct', 200, 'type=direct'],
    ['GET /messages', `narrow=${encodeURIComponent('[["channel","x"]]')}`, 249, `narrow=${encodeURIComponent('[["stream","x"]]')}`],
    [
      'GET /messages',
      `narrow=${encodeURIComponent('[{"operator":"channel","operand":"x"}]')}`,
      250,
      `narrow=${encodeURIComponent('[{"operator":"channel","operand":"x"}]')}`,
    ],
    ['GET /messages', `narrow=${encodeURIComponent('[{"operator":"with","operand":1}]')}`, 270, `narrow=${encodeURIComponent('[]')}`],
    ['GET /messages', 'narrow=not-json', 237, 'narrow=not-json'],
    ['POST /typing', 'type=channel&stream_id=7&topic=t', 214, 'type=stream&topic=t&to=%5B7%5D'],
    ['POST /typing', 'type=channel&stream_id=7&topic=t', 215, 'type=stream&stream_id=7&topic=t'],
    ['PATCH /messages/{id}', 'content=%40**channel**', 246, 'content=%40**stream**'],
    [
      'GET /messages',
      `narrow=${encodeURIComponent('[{"operator":"dm","operand":[1,2]},{"operator":"is","operand":"unread"}]')}`,
      185,
      `narrow=${encodeURIComponent('[{"operator":"dm","operand":[1,2]},{"operator":"is","operand":"unread"}]')}`,
    ],
    ['PATCH /messages/{id}', 'content=%40**channel**', 247, 'content=%40**channel**'],
    ['POST /messages', 'type=stream&content=%40**channel**', 185, 'type=stream&content=%40**stream**'],
  ])('%s with %s on a server at %d → %s', (endpoint, given, real, expected) => {
    const params = new FormFields(given);
    translateRequest(endpoint, params, real, 277);
    expect(new URLSearchParams(params.toString()).toString()).toBe(new URLSearchParams(expected).toString());
  });

  it('only the changes up to the level the client is shown: one shown 240 writes the older forms itself', () => {
    const given = 'type=channel&content=%40**channel**';
    const params = new FormFields(given);
    translateRequest('POST /messages', params, 185, 240);
    expect(params.toString()).toBe(given);
    translateRequest('POST /messages', params, 185, 247);
    expect(params.toString()).toBe('type=channel&content=%40**stream**');
  });
});

describe('M1 with X13: an upstream upgraded while the shim runs', () => {
  it('register shows the app the answer’s own level once it is past the presented one, never less', async () => {
    await setup('8.0');
    expect((await get('/api/v1/server_settings', APP)).body.zulip_feature_level).toBe(277);
    (fake as { featureLevel: number }).featureLevel = 300;
    const reg = await post('/api/v1/register', APP, { fetch_event_types: '["realm"]' });
    expect(reg.body.zulip_feature_level).toBe(300);
  });
});

describe('M1 with a register answer past upstream.maxResponseBytes', () => {
  it('goes on untouched, with the real level, and the warning says what was skipped and which key to raise', async () => {
    fake = await startFake({ era: '8.0' });
    shim = await startShim(fake.url, { app: { featureLevel: 277 }, upstream: { maxResponseBytes: 2048 } });
    const reg = await post('/api/v1/register', APP, APP_REGISTER);
    expect(reg.status).toBe(200);
    expect(reg.body.zulip_feature_level).toBe(237);
    const line = shim.logs.find((l) => l.includes('register answer larger than'));
    expect(line).toContain("upstream.maxResponseBytes: passed on untouched, presence and the mobile app's presented level skipped");
    expect(JSON.parse(line!)).toMatchObject({ limit: 2048, skipped: ['presence', "the mobile app's presented level"] });
  });
});

describe('M1: --check and start-up say whether the app can be served', () => {
  it.each([
    [undefined, 237, undefined],
    [277, undefined, undefined],
    [277, 237, true],
    [277, 185, true],
    [277, 300, true],
    [277, 184, true],
    [277, 156, true],
    [277, 122, true],
    [277, 121, false],
  ] as const)('--app-feature-level %s on a server at %s → ok %s', (asked, real, ok) => {
    const p = appProbe(asked, real);
    expect(p?.ok).toBe(ok);
    if (p && !p.ok)
      expect(p.line).toMatch(/cannot be served by a server at feature level 121 \(Zulip 5\.0, feature level 122, or later is needed\)$/);
  });
});

describe('M2, answers up: register, messages and events as the app’s level has them', () => {
  const asApp = (r: request.Test, agent = APP) => r.set('User-Agent', agent).set('Authorization', fake.auth(10));
  const raw = (r: request.Test) =>
    r.buffer(true).parse((res, done) => {
      let text = '';
      res.on('data', (c: Buffer) => (text += c));
      res.on('end', () => done(null, text));
    });

  it.each([
    ['7.0', true],
    ['8.0', false],
  ] as const)(
    'on %s, the app’s register gains what its parsers require (typing periods added: %s), no other client’s',
    async (era, typing) => {
      fake = await startFake({ era, whole: true });
      shim = await startShim(fake.url, { app: { featureLevel: 277 } });
      const app = await asApp(request(shim.url).post('/api/v1/register')).type('form').send(APP_REGISTER);
      expect(app.body.server_thumbnail_formats).toEqual([]);
      const periods = [
        app.body.server_typing_started_expiry_period_milliseconds,
        app.body.server_typing_stopped_wait_period_milliseconds,
        app.body.server_typing_started_wait_period_milliseconds,
      ];
      if (typing) expect(periods).toEqual([15000, 5000, 10000]);
      else expect(periods.every((p) => typeof p === 'number')).toBe(true); // the server's own
      expect(app.headers['x-zulip-compat-backfilled'] ?? '').toContain('server_thumbnail_formats');
      const other = await asApp(request(shim.url).post('/api/v1/register'), OTHER).type('form').send(APP_REGISTER);
      expect(other.body).not.toHaveProperty('server_thumbnail_formats');
      expect('server_typing_started_wait_period_milliseconds' in other.body).toBe(!typing);
    },
  );

  it('on 7.0, wildcard_mentioned is stream_wildcard_mentioned for the app in messages, one message and both events; every other client gets the upstream’s bytes', async () => {
    fake = await startFake({ era: '7.0', whole: true });
    shim = await startShim(fake.url, { app: { featureLevel: 277 } });
    const flagsOf = (m: { flags: string[] }) => m.flags.filter((f) => f.includes('wildcard'));
    const messages = await asApp(request(shim.url).get('/api/v1/messages?anchor=newest&num_before=5&num_after=0'));
    expect(flagsOf(messages.body.messages[0])).toEqual(['stream_wildcard_mentioned']);
    const one = await asApp(request(shim.url).get('/api/v1/messages/16'));
    expect(flagsOf(one.body.message)).toEqual(['stream_wildcard_mentioned']);
    const reg = await asApp(request(shim.url).post('/api/v1/register')).type('form').send(APP_REGISTER);
    const events = await asApp(request(shim.url).get(`/api/v1/events?queue_id=${reg.body.queue_id}&last_event_id=-1`));
    const byType = (type: string) => events.body.events.find((e: { type: string }) => e.type === type);
    expect(flagsOf(byType('message'))).toEqual(['stream_wildcard_mentioned']);
    expect(flagsOf(byType('update_message'))).toEqual(['stream_wildcard_mentioned']);
    expect(events.body.events).toHaveLength(eraEvents(185).length);

    const upstream = await raw(
      request(fake.url).get('/api/v1/messages?anchor=newest&num_before=5&num_after=0').set('Authorization', fake.auth(10)),
    );
    const other = await raw(asApp(request(shim.url).get('/api/v1/messages?anchor=newest&num_before=5&num_after=0'), OTHER));
    expect(other.body).toBe(upstream.body);
    expect(other.body).toContain('"wildcard_mentioned"');
  });

  it('on 8.0 (the flag split already), the app’s messages are the upstream’s bytes', async () => {
    fake = await startFake({ era: '8.0', whole: true });
    shim = await startShim(fake.url, { app: { featureLevel: 277 } });
    const path = '/api/v1/messages?anchor=newest&num_before=5&num_after=0';
    const upstream = await raw(request(fake.url).get(path).set('Authorization', fake.auth(10)));
    expect((await raw(asApp(request(shim.url).get(path)))).body).toBe(upstream.body);
  });

  it('an answer with the old flag past upstream.maxResponseBytes goes on untouched, with a warning', async () => {
    fake = await startFake({ era: '7.0', whole: true });
    shim = await startShim(fake.url, { app: { featureLevel: 277 }, upstream: { maxResponseBytes: 1024 } });
    const r = await asApp(request(shim.url).get('/api/v1/messages?anchor=newest&num_before=5&num_after=0'));
    expect(r.status).toBe(200);
    expect(JSON.stringify(r.body)).toContain('"wildcard_mentioned"');
    expect(shim.logs.some((l) => l.includes('app answer larger than upstream.maxResponseBytes'))).toBe(true);
  });
});

describe('M6 through the shim: content as the app meant it', () => {
  const postRaw = (body: string, agent = APP) =>
    request(shim.url)
      .post('/api/v1/messages')
      .set('Host', 'chat.example.com')
      .set('User-Agent', agent)
      .set('Authorization', fake.auth(10))
      .set('Content-Type', 'application/x-www-form-urlencoded')
      .send(body);

  it('on 7.0, a live @**topic** is refused with a Zulip error before the upstream; on 8.0 it is sent', async () => {
    fake = await startFake({ era: '7.0', oneRealm: true });
    shim = await startShim(fake.url, { app: { featureLevel: 277 } });
    const before = fake.seen.length;
    const r = await postRaw('type=channel&to=7&topic=t&content=%40**topic**+lunch%3F');
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ result: 'error', msg: TOPIC_WILDCARD_REFUSAL, code: 'BAD_REQUEST' });
    expect(fake.seen.slice(before).filter((s) => s.url.startsWith('/api/v1/messages'))).toEqual([]);
    await postRaw('type=channel&to=7&topic=t&content=%60%40**topic**%60');
    expect(lastSeen('/api/v1/messages').body.toString()).toBe('type=stream&to=7&topic=t&content=%60%40**topic**%60');
    await shim.close();
    await fake.stop();
    fake = await startFake({ era: '8.0', oneRealm: true });
    shim = await startShim(fake.url, { app: { featureLevel: 277 } });
    await postRaw('type=stream&to=7&topic=t&content=%40**topic**');
    expect(lastSeen('/api/v1/messages').body.toString()).toBe('type=stream&to=7&topic=t&content=%40**topic**');
  });

  it('changes only the bytes it rewrites: links on the realm’s URL, repeated parameters kept in order', async () => {
    fake = await startFake({ era: '8.0', oneRealm: true });
    shim = await startShim(fake.url, { app: { featureLevel: 277 } });
    const content = (s: string) => encodeURIComponent(s).replaceAll('%20', '+');
    const said = content('@_**Iago|5** [said](https://chat.example.com/#narrow/channel/5-general/topic/hi/with/12): `#narrow/channel/`');
    const other = content('see https://other.example.com/#narrow/channel/5 and [#general](#narrow/channel/5-general)');
    await postRaw(`type=channel&to=7&topic=a%20b&content=${said}&content=${other}`);
    // Django reads the last `content`: that one is translated, the first goes as sent.
    const otherSent = content('see https://other.example.com/#narrow/channel/5 and [#general](#narrow/stream/5-general)');
    expect(lastSeen('/api/v1/messages').body.toString()).toBe(`type=stream&to=7&topic=a%20b&content=${said}&content=${otherSent}`);
    await postRaw(`type=channel&to=7&topic=a%20b&content=${said}`);
    const saidSent = content('@_**Iago|5** [said](https://chat.example.com/#narrow/stream/5-general/topic/hi/near/12): `#narrow/channel/`');
    expect(lastSeen('/api/v1/messages').body.toString()).toBe(`type=stream&to=7&topic=a%20b&content=${saidSent}`);
  });

  it('a narrow nested too deep to write again reaches the upstream as sent, whose answer the app gets', async () => {
    fake = await startFake({ era: '8.0' });
    shim = await startShim(fake.url, { app: { featureLevel: 277 } });
    const narrow = `[{"operator":"channel","operand":${'['.repeat(100_000)}${']'.repeat(100_000)}}]`;
    const r = await post('/api/v1/messages/flags/narrow', APP, { narrow, op: 'add', flag: 'read', anchor: 'newest' });
    expect(r.status).not.toBe(500);
    expect(new URLSearchParams(lastSeen('/api/v1/messages/flags/narrow').body.toString()).get('narrow')).toBe(narrow);
  });
});

describe('M2: the app’s long poll through the translator', () => {
  it('is ended upstream when the app goes away, not held there to the poll’s end', async () => {
    fake = await startFake({ era: '7.0' });
    shim = await startShim(fake.url, { app: { featureLevel: 277 } });
    let upstreamClosed: Promise<unknown> | undefined;
    fake.override = (req, res) => {
      if (!req.url?.startsWith('/api/v1/events')) return false;
      upstreamClosed = once(res, 'close');
      return true; // held
    };
    const http = await import('node:http');
    const client = http.get(`${shim.url}/api/v1/events?queue_id=q&last_event_id=-1`, {
      headers: { 'user-agent': APP, authorization: fake.auth(10) },
    });
    client.on('error', () => {});
    for (let i = 0; i < 300 && !upstreamClosed; i++) await new Promise((r) => setTimeout(r, 10));
    expect(upstreamClosed).toBeDefined();
    client.destroy();
    await upstreamClosed;
    expect(shim.logs.filter((l) => l.includes('unexpected error'))).toEqual([]);
    fake.override = undefined;
  });
});

describe('M2 on 6.x: the app’s requests and answers across Zulip 7.0’s changes (feature levels 164 to 177)', () => {
  const formOf = (path: string) => Object.fromEntries(new URLSearchParams(lastSeen(path).body.toString()));

  it('164: a register without presence still says the presence intervals the server behaves with', async () => {
    await setup('6.0');
    const reg = await post('/api/v1/register', APP, { fetch_event_types: '["realm"]' });
    expect(reg.body.zulip_feature_level).toBe(277);
    expect(reg.body).toMatchObject({ server_presence_ping_interval_seconds: 60, server_presence_offline_threshold_seconds: 140 });
    const other = await post('/api/v1/register', OTHER, { fetch_event_types: '["realm"]' });
    expect(other.body).not.toHaveProperty('server_presence_ping_interval_seconds');
  });

  it('170: POST /user_topics, muted and none → PATCH muted_topics add and remove; unmuted and followed refused, nothing sent', async () => {
    await setup('6.0');
    fake.override = (req, res) => {
      if (!req.url?.startsWith('/api/v1/users/me/subscriptions/muted_topics')) return false;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"success","msg":""}');
      return true;
    };
    const muted = await post('/api/v1/user_topics', APP, { stream_id: '7', topic: 'lunch', visibility_policy: '1' });
    expect(muted.body).toEqual({ result: 'success', msg: '' });
    const seen = lastSeen('/api/v1/users/me/subscriptions/muted_topics');
    expect(seen.method).toBe('PATCH');
    expect(seen.body.toString()).toBe('stream_id=7&topic=lunch&op=add');
    await post('/api/v1/user_topics', APP, { stream_id: '7', topic: 'lunch', visibility_policy: '0' });
    expect(formOf('/api/v1/users/me/subscriptions/muted_topics')).toEqual({ stream_id: '7', topic: 'lunch', op: 'remove' });
    const before = fake.seen.length;
    for (const policy of ['2', '3']) {
      const r = await post('/api/v1/user_topics', APP, { stream_id: '7', topic: 'lunch', visibility_policy: policy });
      expect(r.status).toBe(400);
      expect(r.body).toEqual({ result: 'error', msg: USER_TOPIC_POLICY_REFUSAL, code: 'BAD_REQUEST' });
    }
    expect(fake.seen.length).toBe(before);
    await post('/api/v1/user_topics', OTHER, { stream_id: '7', topic: 'lunch', visibility_policy: '1' });
    expect(lastSeen('/api/v1/user_topics').method).toBe('POST');
  });

  it('170: on 7.0, POST /user_topics goes on as sent', async () => {
    await setup('7.0');
    await post('/api/v1/user_topics', APP, { stream_id: '7', topic: 'lunch', visibility_policy: '3' });
    expect(formOf('/api/v1/user_topics')).toEqual({ stream_id: '7', topic: 'lunch', visibility_policy: '3' });
  });

  it('171: POST /fetch_api_key answers the app with user_id, from GET /users/me with the key just returned', async () => {
    await setup('6.0');
    const login = (agent: string) =>
      request(shim.url)
        .post('/api/v1/fetch_api_key')
        .set('User-Agent', agent)
        .type('form')
        .send({ username: 'person12@example.org', password: 'password' });
    const app = await login(APP);
    expect(app.status).toBe(200);
    expect(app.body).toEqual({
      result: 'success',
      msg: '',
      api_key: 'key12secretAbC',
      email: fake.users.find((u) => u.user_id === 12)!.email,
      user_id: 12,
    });
    const asked = lastSeen('/api/v1/users/me');
    expect(asked.headers.authorization).toBe(fake.auth(12));
    const other = await login(OTHER);
    expect(other.body).not.toHaveProperty('user_id');
    const wrong = await request(shim.url)
      .post('/api/v1/fetch_api_key')
      .set('User-Agent', APP)
      .type('form')
      .send({ username: 'person12@example.org', password: 'nope' });
    expect(wrong.status).toBe(401);
    expect(wrong.body.msg).toBe('Your username or password is incorrect');
  });

  it('174: messages and typing: type direct → private', async () => {
    await setup('6.0');
    await post('/api/v1/messages', APP, { type: 'direct', to: '[11,12]', content: 'hi', read_by_sender: 'true' });
    expect(formOf('/api/v1/messages')).toEqual({ type: 'private', to: '[11,12]', content: 'hi', read_by_sender: 'true' });
    await post('/api/v1/typing', APP, { type: 'direct', to: '[11]', op: 'start' });
    expect(formOf('/api/v1/typing')).toEqual({ type: 'private', to: '[11]', op: 'start' });
    await post('/api/v1/typing', OTHER, { type: 'direct', to: '[11]', op: 'start' });
    expect(formOf('/api/v1/typing').type).toBe('direct');
  });

  it('177: narrows dm → pm-with, dm-including → group-pm-with, is:dm → is:private; on 7.0 as sent', async () => {
    await setup('6.0');
    const narrow = JSON.stringify([
      { operator: 'dm', operand: [11, 12] },
      { operator: 'is', operand: 'dm', negated: true },
      ['dm-including', 11],
      { operator: 'is', operand: 'starred' },
    ]);
    await get(`/api/v1/messages?anchor=newest&num_before=50&narrow=${encodeURIComponent(narrow)}`, APP);
    const seen = new URL(lastSeen('/api/v1/messages').url, 'http://x').searchParams;
    expect(JSON.parse(seen.get('narrow')!)).toEqual([
      { operator: 'pm-with', operand: [11, 12] },
      { operator: 'is', operand: 'private', negated: true },
      ['group-pm-with', 11],
      { operator: 'is', operand: 'starred' },
    ]);
    await post('/api/v1/messages/flags/narrow', APP, {
      narrow: JSON.stringify([{ operator: 'dm', operand: [11] }]),
      op: 'add',
      flag: 'read',
    });
    expect(JSON.parse(formOf('/api/v1/messages/flags/narrow').narrow!)).toEqual([{ operator: 'pm-with', operand: [11] }]);
    await shim.close();
    await fake.stop();
    await setup('7.0');
    await get(`/api/v1/messages?anchor=newest&num_before=50&narrow=${encodeURIComponent(narrow)}`, APP);
    expect(new URL(lastSeen('/api/v1/messages').url, 'http://x').searchParams.get('narrow')).toBe(narrow);
  });

  it('177: links in content as the old web app opens them: dm/…-dm → pm-with/…-pm, is/dm → is/private, outside code only', () => {
    const sent = (content: string) => {
      const params = new FormFields(`type=stream&content=${encodeURIComponent(content)}`);
      translateRequest('POST /messages', params, 156, 277, {}, { realmUrl: 'https://chat.example.com' });
      return params.get('content');
    };
    expect(sent('[us](#narrow/dm/11,12-dm) [group](https://chat.example.com/#narrow/dm/11,12,13-group/near/5) [all](#narrow/is/dm)')).toBe(
      '[us](#narrow/pm-with/11,12-pm) [group](https://chat.example.com/#narrow/pm-with/11,12,13-group/near/5) [all](#narrow/is/private)',
    );
    expect(sent('`#narrow/dm/11,12-dm` and https://other.example.com/#narrow/dm/11,12-dm')).toBe(
      '`#narrow/dm/11,12-dm` and https://other.example.com/#narrow/dm/11,12-dm',
    );
  });
});
