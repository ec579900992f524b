import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import request from 'supertest';
import { parse } from 'yaml';
import { buildAnswers, OPENAPI_ANSWERS_FILE } from '../scripts/openapi-answers.js';
import { PROJECT_ROOT } from '../src/version.js';
import { afterEach, describe, expect, it } from 'vitest';
import { APP_PARSERS, parseProblems } from './support/app-parsers.js';
import { eraAnswer, eraEvents } from './support/era-answers.js';
import { ERA_FEATURE_LEVEL, startFake, type FakeZulip } from './support/fake-zulip.js';
import { APP_AGENT, APP_REGISTER, OTHER_AGENT } from './support/mobile-app.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * M4 (docs/mobile-app.md): the Zulip mobile app's own parsers are the judge. Through the shim
 * with --app-feature-level 277, every answer and event the app parses, from upstreams that send
 * whole answers as Zulip 7.0 and 8.0 do, has every field those parsers require, with its JSON
 * type: register, server_settings, messages, one message and every event the era sends.
 */

const APP = APP_AGENT;

let fake: FakeZulip;
let shim: RunningShim;
afterEach(async () => {
  await shim?.close();
  await fake?.stop();
});

const asApp = (r: request.Test) => r.set('User-Agent', APP).set('Authorization', fake.auth(10));

describe.each(['7.0', '8.0'] as const)('the app’s parsers accept what it gets through the shim from %s', (era) => {
  it('register, server_settings, messages, one message and every event', async () => {
    fake = await startFake({ era, whole: true });
    shim = await startShim(fake.url, { app: { featureLevel: 277 } });

    const settings = await asApp(request(shim.url).get('/api/v1/server_settings'));
    expect(settings.body.zulip_feature_level).toBe(277);
    expect(parseProblems('GetServerSettingsResult', settings.body)).toEqual([]);

    const register = await asApp(request(shim.url).post('/api/v1/register')).type('form').send(APP_REGISTER);
    expect(register.status).toBe(200);
    expect(register.body.zulip_feature_level).toBe(277);
    expect(register.body.realm_users.length).toBeGreaterThan(1);
    expect(parseProblems('InitialSnapshot', register.body)).toEqual([]);

    const narrow = JSON.stringify([{ operator: 'channel', operand: 7 }]);
    const messages = await asApp(
      request(shim.url).get(`/api/v1/messages?anchor=newest&num_before=20&num_after=0&narrow=${encodeURIComponent(narrow)}`),
    );
    expect(messages.body.messages.map((m: { type: string }) => m.type).sort()).toEqual(['private', 'stream']);
    expect(parseProblems('GetMessagesResult', messages.body)).toEqual([]);
    const message = await asApp(request(shim.url).get('/api/v1/messages/16?apply_markdown=true'));
    expect(parseProblems('GetMessageResult', message.body)).toEqual([]);

    const events = await asApp(request(shim.url).get(`/api/v1/events?queue_id=${register.body.queue_id}&last_event_id=-1`));
    expect(events.body.events).toHaveLength(eraEvents(ERA_FEATURE_LEVEL[era]).length);
    expect(events.body.events.find((e: { type: string }) => e.type === 'delete_message')).toHaveProperty('message_ids');
    expect(parseProblems('GetEventsResult', events.body)).toEqual([]);
  });
});

const DESCRIPTION = resolve(PROJECT_ROOT, '../shared/reference/zulip-openapi.yaml');

describe('every other client, with the flag on', () => {
  it('gets exactly what it gets with the flag off, from an upstream sending whole answers', async () => {
    const seen = async (flag: boolean) => {
      fake = await startFake({ era: '8.0', whole: true, oneRealm: true });
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
    expect(JSON.parse(on.register).zulip_feature_level).toBe(237);
  });
});

describe('the fixtures', () => {
  // Skipped (and reported so) where Zulip's API description is not beside the checkout.
  it.skipIf(!existsSync(DESCRIPTION))('hold what scripts/openapi-answers.ts builds from the API description beside the project', () => {
    const file = DESCRIPTION;
    const stored = JSON.parse(readFileSync(OPENAPI_ANSWERS_FILE, 'utf8'));
    expect(buildAnswers(parse(readFileSync(file, 'utf8'), { maxAliasCount: -1 }), stored.source)).toEqual(stored);
  });
});

describe('the judge', () => {
  it('is the app’s parsers at the pinned commit: the classes the inventory names, and its 46 event cases', () => {
    expect(APP_PARSERS.commit).toMatch(/^e989e4f6/);
    for (const name of ['InitialSnapshot', 'User', 'ZulipStream', 'Subscription', 'StreamMessage', 'DmMessage', 'GetEventsResult']) {
      expect(APP_PARSERS.classes[name]?.fields.length, name).toBeGreaterThan(0);
    }
    expect(Object.keys(APP_PARSERS.dispatch.Event!.cases)).toHaveLength(46);
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
  ])('fails a register answer with %s', (_what, spoil, problem) => {
    const register = eraAnswer('register', ERA_FEATURE_LEVEL['8.0']);
    expect(parseProblems('InitialSnapshot', register)).toEqual([]);
    spoil(register);
    expect(parseProblems('InitialSnapshot', register).join('\n')).toMatch(problem);
  });

  it('lets an optional field be absent or null, as the app’s parser does', () => {
    const register = eraAnswer('register', ERA_FEATURE_LEVEL['8.0']);
    const user = (register.realm_users as Record<string, unknown>[])[0]!;
    delete user.delivery_email;
    user.avatar_url = null;
    expect(APP_PARSERS.classes.User!.fields.filter((f) => f.optional).map((f) => f.key)).toEqual(
      expect.arrayContaining(['delivery_email', 'avatar_url']),
    );
    expect(parseProblems('InitialSnapshot', register)).toEqual([]);
  });

  it('lets an enum with a fallback take any value, as the app’s $enumDecode(…, unknownValue:) does', () => {
    const register = eraAnswer('register', ERA_FEATURE_LEVEL['8.0']);
    const settings = register.user_settings as Record<string, unknown>;
    expect(APP_PARSERS.classes.UserSettings!.fields.find((f) => f.key === 'emojiset')?.shape).toMatchObject({
      type: 'enum',
      fallback: true,
    });
    for (const unknown of ['no-such-set', 5]) {
      settings.emojiset = unknown;
      expect(parseProblems('InitialSnapshot', register)).toEqual([]);
    }
  });

  it('fails what the app’s dispatch cannot place, and a known event without its fields', () => {
    expect(parseProblems('Message', { type: 'direct' }).join()).toMatch(/the app throws/);
    expect(parseProblems('GetEventsResult', { events: [{ id: 1, type: 'realm_user', op: 'remove', person: {} }] }).join()).toMatch(
      /person\.user_id .*missing/,
    );
    expect(parseProblems('GetEventsResult', { events: [{ id: 1, type: 'no_such_event' }] })).toEqual([]); // UnexpectedEvent: ignored
  });
});
