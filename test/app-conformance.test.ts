import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import request from 'supertest';
import { parse } from 'yaml';
import { APP_PARSERS_DIR, APP_REF_NAMES, APP_REFS, readAppParsers } from '../scripts/app-parsers.js';
import { buildAnswers, OPENAPI_ANSWERS_FILE } from '../scripts/openapi-answers.js';
import { CHANGES } from '../src/changes/index.js';
import { PROJECT_ROOT } from '../src/version.js';
import { afterEach, describe, expect, it } from 'vitest';
import { APP_JUDGES, judgeAt } from './support/app-parsers.js';
import { eraAnswer, eraEvents } from './support/era-answers.js';
import { ERA_FEATURE_LEVEL, startFake, type FakeZulip } from './support/fake-zulip.js';
import { APP_AGENT, APP_REGISTER, OTHER_AGENT } from './support/mobile-app.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * M4, M5 (docs/mobile-app.md): the Zulip mobile app's own parsers are the judge, at every ref of
 * the app listed in scripts/app-parsers.ts (APP_REFS: the pinned commit, the newest main, the
 * open pull requests that remove old-server code). Through the shim with --app-feature-level 277,
 * every answer and event the app parses, from upstreams that send whole answers as Zulip 5.0, 6.0,
 * 7.0 and 8.0 do, has every field the parsers at each ref require, with its JSON type: fetch_api_key,
 * register, server_settings, messages, one message and every event the era sends.
 */

const APP = APP_AGENT;

let fake: FakeZulip;
let shim: RunningShim;
afterEach(async () => {
  await shim?.close();
  await fake?.stop();
});

const asApp = (r: request.Test) => r.set('User-Agent', APP).set('Authorization', fake.auth(10));

// Every listed ref of the app (APP_REFS) × every era; each answer's problems are reported even
// after an earlier answer's (expect.soft), so a failure lists all that the ref misses.
const EACH_REF_AND_ERA = APP_JUDGES.flatMap((judge) =>
  (['5.0', '6.0', '7.0', '8.0'] as const).map((era) => [judge.name, judge.ref, era, judge] as const),
);

describe.each(EACH_REF_AND_ERA)('the app’s parsers at %s (%s) accept what it gets through the shim from %s', (_name, _ref, era, judge) => {
  it('fetch_api_key, register, server_settings, messages, one message and every event', async () => {
    fake = await startFake({ era, whole: true });
    shim = await startShim(fake.url, { app: { featureLevel: 277 } });

    const settings = await asApp(request(shim.url).get('/api/v1/server_settings'));
    expect(settings.body.zulip_feature_level).toBe(277);
    expect.soft(judge.parseProblems('GetServerSettingsResult', settings.body)).toEqual([]);

    const login = await request(shim.url)
      .post('/api/v1/fetch_api_key')
      .set('User-Agent', APP)
      .type('form')
      .send({ username: 'person10@example.org', password: 'password' });
    expect(login.status).toBe(200);
    expect.soft(judge.parseProblems('FetchApiKeyResult', login.body)).toEqual([]);

    const register = await asApp(request(shim.url).post('/api/v1/register')).type('form').send(APP_REGISTER);
    expect(register.status).toBe(200);
    expect(register.body.zulip_feature_level).toBe(277);
    expect(register.body.realm_users.length).toBeGreaterThan(1);
    expect.soft(judge.parseProblems('InitialSnapshot', register.body)).toEqual([]);
    if (ERA_FEATURE_LEVEL[era] < 140) {
      // The emoji names the app fetches from the URL register names: the shim's, below 140.
      const emoji = await request(shim.url).get(new URL(register.body.server_emoji_data_url).pathname).set('User-Agent', APP);
      expect(emoji.status).toBe(200);
      expect.soft(judge.parseProblems('ServerEmojiData', emoji.body)).toEqual([]);
    }

    const narrow = JSON.stringify([{ operator: 'channel', operand: 7 }]);
    const messages = await asApp(
      request(shim.url).get(`/api/v1/messages?anchor=newest&num_before=20&num_after=0&narrow=${encodeURIComponent(narrow)}`),
    );
    expect(messages.body.messages.map((m: { type: string }) => m.type).sort()).toEqual(['private', 'stream']);
    expect.soft(judge.parseProblems('GetMessagesResult', messages.body)).toEqual([]);
    const message = await asApp(request(shim.url).get('/api/v1/messages/16?apply_markdown=true'));
    expect.soft(judge.parseProblems('GetMessageResult', message.body)).toEqual([]);

    const events = await asApp(request(shim.url).get(`/api/v1/events?queue_id=${register.body.queue_id}&last_event_id=-1`));
    expect(events.body.events).toHaveLength(eraEvents(ERA_FEATURE_LEVEL[era]).length);
    expect(events.body.events.find((e: { type: string }) => e.type === 'delete_message')).toHaveProperty('message_ids');
    expect.soft(judge.parseProblems('GetEventsResult', events.body)).toEqual([]);

    if (ERA_FEATURE_LEVEL[era] < 134) {
      // A mute elsewhere: the upstream's whole list, for a channel the register named; the app
      // gets the user_topic event the list's change makes (fl134), before the list it ignores.
      const channel = register.body.subscriptions[0].name as string;
      fake.override = (req, res) => {
        if (!req.url?.startsWith('/api/v1/events?')) return false;
        const events = [{ id: 100, type: 'muted_topics', muted_topics: [[channel, 'lunch', 1700000000]] }];
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ result: 'success', msg: '', events }));
        return true;
      };
      const muted = await asApp(request(shim.url).get(`/api/v1/events?queue_id=${register.body.queue_id}&last_event_id=99`));
      expect(muted.body.events.map((e: { type: string }) => e.type)).toEqual(['user_topic', 'muted_topics']);
      expect.soft(judge.parseProblems('GetEventsResult', muted.body)).toEqual([]);
    }
  });
});

const DESCRIPTION = resolve(PROJECT_ROOT, '../shared/reference/zulip-openapi.yaml');

describe('at the newest sweep, the judge fails the shim’s answers without the changes the sweep needs', () => {
  it('a 7.0 register without each register change’s keys, and an update_message event with the flag as 7.0 names it', async () => {
    fake = await startFake({ era: '7.0', whole: true });
    shim = await startShim(fake.url, { app: { featureLevel: 277 } });
    const judge = judgeAt('sweep-2436');
    const register = await asApp(request(shim.url).post('/api/v1/register')).type('form').send(APP_REGISTER);
    expect(judge.parseProblems('InitialSnapshot', register.body)).toEqual([]);
    const added = CHANGES.filter((c) => c.register && c.featureLevel > ERA_FEATURE_LEVEL['7.0']);
    expect(added.map((c) => c.feature)).toEqual(['typing_periods', 'thumbnail_formats']);
    for (const change of added) {
      const without = structuredClone(register.body);
      for (const key of change.register!.fields) delete without[key];
      const problems = judge.parseProblems('InitialSnapshot', without).join('\n');
      for (const key of change.register!.fields) expect(problems).toMatch(new RegExp(`${key} .*: missing`));
    }

    const events = await asApp(request(shim.url).get(`/api/v1/events?queue_id=${register.body.queue_id}&last_event_id=-1`));
    expect(judge.parseProblems('GetEventsResult', events.body)).toEqual([]);
    const asSent = structuredClone(events.body);
    const edit = asSent.events.find((e: { type: string }) => e.type === 'update_message');
    edit.flags = edit.flags.map((f: string) => (f === 'stream_wildcard_mentioned' ? 'wildcard_mentioned' : f));
    expect(judge.parseProblems('GetEventsResult', asSent).join('\n')).toMatch(/flags.*is not one of/);
  });
});

describe.each(['5.0', '6.0', '7.0', '8.0'] as const)('every other client, with the flag on, from %s', (era) => {
  it('gets exactly what it gets with the flag off, from an upstream sending whole answers', async () => {
    const seen = async (flag: boolean) => {
      fake = await startFake({ era, whole: true, oneRealm: true });
      shim = await startShim(fake.url, { app: flag ? { featureLevel: 277 } : {} });
      const as = (r: request.Test) =>
        r
          .set('User-Agent', OTHER_AGENT)
          .set('Authorization', fake.auth(10))
          .buffer(true)
          .parse((res, done) => {
            let text = '';
            res.on('data', (c: Buffer) => (text += c));
            res.on('end', () => done(null, text));
          });
      const register = await as(request(shim.url).post('/api/v1/register')).type('form').send(APP_REGISTER);
      const out = {
        settings: (await as(request(shim.url).get('/api/v1/server_settings'))).body as string,
        register: (register.body as string).replace(/"queue_id":"[^"]*"/, '"queue_id":"(each its own)"'),
        messages: (await as(request(shim.url).get('/api/v1/messages?anchor=newest&num_before=5&num_after=0'))).body as string,
        events: (
          await as(request(shim.url).get(`/api/v1/events?queue_id=${JSON.parse(register.body as string).queue_id}&last_event_id=-1`))
        ).body as string,
      };
      await shim.close();
      await fake.stop();
      return out;
    };
    const off = await seen(false);
    const on = await seen(true);
    expect(on).toEqual(off);
    expect(JSON.parse(on.register).zulip_feature_level).toBe(ERA_FEATURE_LEVEL[era]);
    expect(on.messages).toContain('"wildcard_mentioned"');
  });
});

describe('the fixtures', () => {
  // Skipped (and reported so) where Zulip's API description is not beside the checkout.
  it.skipIf(!existsSync(DESCRIPTION))('hold what scripts/openapi-answers.ts builds from the API description beside the project', () => {
    const file = DESCRIPTION;
    const stored = JSON.parse(readFileSync(OPENAPI_ANSWERS_FILE, 'utf8'));
    expect(buildAnswers(parse(readFileSync(file, 'utf8'), { maxAliasCount: -1 }), stored.source)).toEqual(stored);
  });

  it('are the app’s refs APP_REFS lists, one each, each recording its ref and the commit it resolved to', () => {
    expect(readdirSync(APP_PARSERS_DIR).sort()).toEqual(APP_REF_NAMES.map((name) => `${name}.json`).sort());
    expect(APP_JUDGES.map((j) => j.name)).toEqual(APP_REF_NAMES);
    for (const judge of APP_JUDGES) {
      expect(judge.parsers.repository, judge.name).toBe('zulip/zulip-flutter');
      expect(judge.parsers.ref, judge.name).toBe(APP_REFS[judge.name].ref);
      expect(judge.parsers.commit, judge.name).toMatch(/^[0-9a-f]{40}$/);
      expect(judge.commit, judge.name).toBe(judge.parsers.commit);
      if (judge.sameAs) expect(judgeAt(judge.sameAs).commit, judge.name).toBe(judge.commit);
    }
    expect(judgeAt('pinned').commit.startsWith(APP_REFS.pinned.ref)).toBe(true);
  });

  // Skipped (and reported so) unless ZULIP_FLUTTER_GIT_DIR names a mirror of zulip/zulip-flutter
  // (`git clone --mirror`, for refs/pull/N/head). Fails when a ref moved (a new main, a pull
  // request pushed again): `npm run fixtures:app-parsers -- <git dir>` writes them anew.
  const gitDir = process.env.ZULIP_FLUTTER_GIT_DIR;
  it.skipIf(!gitDir)(
    'hold what scripts/app-parsers.ts reads at each ref in the git dir ZULIP_FLUTTER_GIT_DIR names',
    () => {
      for (const judge of APP_JUDGES) expect(readAppParsers(gitDir!, judge.ref), judge.name).toEqual(judge.parsers);
    },
    60_000,
  );
});

describe('the judge', () => {
  const pinned = judgeAt('pinned');
  const sweep = judgeAt('sweep-2436');

  it('at the pinned commit is the app’s parsers there: the classes the inventory names, and its 46 event cases', () => {
    expect(pinned.parsers.commit).toMatch(/^e989e4f6/);
    for (const name of ['InitialSnapshot', 'User', 'ZulipStream', 'Subscription', 'StreamMessage', 'DmMessage', 'GetEventsResult']) {
      expect(pinned.parsers.classes[name]?.fields.length, name).toBeGreaterThan(0);
    }
    expect(Object.keys(pinned.parsers.dispatch.Event!.cases)).toHaveLength(46);
  });

  it.each([
    ['a required field missing', (r: Record<string, unknown>) => delete r.max_topic_length, /max_topic_length .*: missing/],
    ['a wrong JSON type', (r: Record<string, unknown>) => (r.zulip_feature_level = '277'), /zulip_feature_level .*is not a number/],
    [
      'an enum value with no fallback',
      (r: Record<string, unknown>) => (r.realm_wildcard_mention_policy = 4),
      /realm_wildcard_mention_policy .*is not one of/,
    ],
    [
      'a user without a required field, deep in a list',
      (r: Record<string, unknown>) => delete (r.realm_users as Record<string, unknown>[])[0]!.role,
      /realm_users .*\[0\]\.role .*: missing/,
    ],
    [
      'an optional field that is there with the wrong JSON type',
      (r: Record<string, unknown>) => ((r.realm_users as Record<string, unknown>[])[0]!.delivery_email = 5),
      /realm_users .*\[0\]\.delivery_email .*is not a string/,
    ],
  ])('at the pinned commit fails a register answer with %s', (_what, spoil, problem) => {
    const register = eraAnswer('register', ERA_FEATURE_LEVEL['8.0']);
    expect(pinned.parseProblems('InitialSnapshot', register)).toEqual([]);
    spoil(register);
    expect(pinned.parseProblems('InitialSnapshot', register).join('\n')).toMatch(problem);
  });

  it('at the pinned commit lets an optional field be absent or null, as the app’s parser does', () => {
    const register = eraAnswer('register', ERA_FEATURE_LEVEL['8.0']);
    const user = (register.realm_users as Record<string, unknown>[])[0]!;
    delete user.delivery_email;
    user.avatar_url = null;
    expect(pinned.parsers.classes.User!.fields.filter((f) => f.optional).map((f) => f.key)).toEqual(
      expect.arrayContaining(['delivery_email', 'avatar_url']),
    );
    expect(pinned.parseProblems('InitialSnapshot', register)).toEqual([]);
  });

  it('at the pinned commit lets an enum with a fallback take any value, as the app’s $enumDecode(…, unknownValue:) does', () => {
    const register = eraAnswer('register', ERA_FEATURE_LEVEL['8.0']);
    const settings = register.user_settings as Record<string, unknown>;
    expect(pinned.parsers.classes.UserSettings!.fields.find((f) => f.key === 'emojiset')?.shape).toMatchObject({
      type: 'enum',
      fallback: true,
    });
    for (const unknown of ['no-such-set', 5]) {
      settings.emojiset = unknown;
      expect(pinned.parseProblems('InitialSnapshot', register)).toEqual([]);
    }
  });

  it('at the pinned commit fails what the app’s dispatch cannot place, and a known event without its fields', () => {
    expect(pinned.parseProblems('Message', { type: 'direct' }).join()).toMatch(/the app throws/);
    expect(pinned.parseProblems('GetEventsResult', { events: [{ id: 1, type: 'realm_user', op: 'remove', person: {} }] }).join()).toMatch(
      /person\.user_id .*missing/,
    );
    expect(pinned.parseProblems('GetEventsResult', { events: [{ id: 1, type: 'no_such_event' }] })).toEqual([]); // UnexpectedEvent: ignored
  });

  // The app's server sweep (pull requests 2398, 2416, 2436) deletes the defaults and values it kept
  // for servers before 9.0: what the pinned commit let an old server leave out, 2436 requires.
  it.each([
    'server_typing_started_expiry_period_milliseconds',
    'server_typing_stopped_wait_period_milliseconds',
    'server_typing_started_wait_period_milliseconds',
    'server_thumbnail_formats',
  ])('at sweep-2436 fails a register answer without %s, which the pinned commit gives a default', (key) => {
    const register = eraAnswer('register', ERA_FEATURE_LEVEL['8.0']);
    register.server_thumbnail_formats = []; // feature level 273 (9.0): not in 8.0's answer
    expect(sweep.parseProblems('InitialSnapshot', register)).toEqual([]);
    delete register[key];
    expect(pinned.parseProblems('InitialSnapshot', register)).toEqual([]);
    expect(sweep.parseProblems('InitialSnapshot', register).join('\n')).toMatch(
      new RegExp(`^InitialSnapshot\\.${key} \\[.*\\]: missing$`, 'm'),
    );
  });

  it('at sweep-2436 fails an update_message event flagged wildcard_mentioned (MessageFlag without it, no fallback); the pinned commit takes it', () => {
    const event = eraEvents(ERA_FEATURE_LEVEL['8.0']).find((e) => e.type === 'update_message')!;
    expect(sweep.parseProblems('GetEventsResult', { events: [event] })).toEqual([]);
    const flagged = { events: [{ ...event, flags: ['read', 'wildcard_mentioned'] }] };
    expect(pinned.parseProblems('GetEventsResult', flagged)).toEqual([]);
    expect(sweep.parseProblems('GetEventsResult', flagged).join('\n')).toMatch(
      /^GetEventsResult\.events .*\[0\]\.flags \[UpdateMessageEvent, .*\]\[1\]: "wildcard_mentioned" is not one of /m,
    );
    // A message's own flags go through MessageFlag.fromRawString, which makes an unknown one `unknown`.
    const answer = eraAnswer('message', ERA_FEATURE_LEVEL['8.0']);
    (answer.message as Record<string, unknown>).flags = ['read', 'wildcard_mentioned'];
    expect(sweep.parseProblems('GetMessageResult', answer)).toEqual([]);
  });
});
