import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { EMOJI_DATA_PATH, emojiDataOf } from '../src/changes/fl140-server-emoji-data-url.js';
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

async function setup(era: Era, whole = false) {
  fake = await startFake({ era, whole });
  shim = await startShim(fake.url, { app: { featureLevel: 277 } });
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

  it('on 5.0 without the upstream’s file: register goes without the key (and says why), the path answers 502', async () => {
    await setup('5.0', true);
    fake.override = (req, res) => {
      if (req.url !== '/static/generated/emoji/emoji_codes.json') return false;
      res.writeHead(404, { 'content-type': 'text/html' }).end('<h1>Not Found</h1>');
      return true;
    };
    const reg = await register();
    expect(reg.status).toBe(200);
    expect(reg.body).not.toHaveProperty('server_emoji_data_url');
    expect(shim.logs.some((l) => l.includes("the upstream's static file could not be had") && l.includes('answered 404'))).toBe(true);
    const data = await request(shim.url).get(EMOJI_DATA_PATH).set('User-Agent', APP);
    expect(data.status).toBe(502);
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
