import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { deflateSync } from 'node:zlib';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startReplay, type Replay } from '../src/har/replay.js';
import { createLogger } from '../src/observability/logger.js';
import { until } from './support/cli-run.js';
import { startShim, type RunningShim } from './support/shim.js';

/** H2: HAR files made by other tools replay too. */

const log = createLogger('silent');
const fixture = (name: string) => new URL(`./fixtures/${name}`, import.meta.url).pathname;
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==', 'base64');

const binary = (res: request.Test) =>
  res.buffer(true).parse((stream, done) => {
    const chunks: Buffer[] = [];
    stream.on('data', (d: Buffer) => chunks.push(d));
    stream.on('end', () => done(null, Buffer.concat(chunks)));
  });

describe('a Chrome devtools export, through the shim', () => {
  let replay: Replay;
  let shim: RunningShim;
  beforeAll(async () => {
    replay = await startReplay({ file: fixture('devtools.har'), strict: false, log });
    shim = await startShim(replay.url, {}, { upstreamId: 'replay:devtools' });
  });
  afterAll(async () => {
    await shim.close();
    await replay.close();
  });

  it('skips entries without an answer (status 0) and keeps the rest', () => {
    expect(replay.entries).toBe(7);
  });

  it('serves server_settings to the shim, which adds its own field (T2)', async () => {
    const res = await request(shim.url).get('/api/v1/server_settings');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      realm_name: 'Devtools Example',
      zulip_version: '2.1.7',
      zulip_compat_shim: { emulated: expect.arrayContaining(['presence_last_update_id']) },
    });
    expect(res.body.zulip_feature_level).toBeUndefined();
  });

  it('drops the recorded transfer headers (gzip, length) and sends the decoded body with its own length', async () => {
    const res = await request(shim.url).get('/json/users/me/alert_words');
    expect(res.status).toBe(200);
    expect(res.headers['content-encoding']).toBeUndefined();
    expect(res.headers['x-frame-options']).toBe('DENY');
    expect(Number(res.headers['content-length'])).toBe(Buffer.byteLength(JSON.stringify(res.body)));
    expect(res.body.alert_words).toEqual(['lunch']);
  });

  it('matches the query whatever its order, and form bodies as parameter sets', async () => {
    const messages = await request(shim.url).get('/json/messages?client_gravatar=true&narrow=[]&num_after=0&num_before=2&anchor=newest');
    expect(messages.status).toBe(200);
    expect(messages.body.messages).toHaveLength(2);
    const sent = await request(shim.url)
      .post('/json/messages')
      .type('form')
      .send('content=Hello+from+replay&topic=greetings&to=general&type=stream');
    expect(sent.status).toBe(200);
    expect(sent.body.id).toBe(43);
  });

  it('matches a multipart upload with another boundary', async () => {
    const res = await request(shim.url)
      .post('/json/user_uploads')
      .attach('file', Buffer.from('meeting notes\nline two\n'), { filename: 'notes.txt', contentType: 'text/plain' });
    expect(res.status).toBe(200);
    expect(res.body.uri).toBe('/user_uploads/2/ab/notes.txt');
  });

  it('serves base64 content as bytes', async () => {
    const res = await binary(request(shim.url).get('/static/images/logo/zulip-icon-128x128.png'));
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('image/png');
    expect(res.body).toEqual(PNG);
  });

  it('answers identical requests in recorded order, then repeats the last', async () => {
    const second = await request(shim.url).get('/json/users/me/alert_words');
    const third = await request(shim.url).get('/json/users/me/alert_words');
    expect(second.body.alert_words).toEqual(['lunch', 'deploy']);
    expect(third.body.alert_words).toEqual(['lunch', 'deploy']);
  });

  it('misses what the file does not hold (the blocked beacon, a changed body)', async () => {
    const beacon = await request(shim.url).get('/json/analytics/beacon');
    expect(beacon.status).toBe(502);
    expect(beacon.body).toMatchObject({ code: 'REPLAY_MISS', msg: 'No recorded answer for GET /json/analytics/beacon' });
    const other = await request(shim.url)
      .post('/json/messages')
      .type('form')
      .send('content=Something+else&topic=greetings&to=general&type=stream');
    expect(other.status).toBe(502);
    expect(other.body.code).toBe('REPLAY_MISS');
    expect(replay.misses()).toHaveLength(2);
  });
});

describe('a mitmproxy export, plain and as .zhar', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'zcs-mitm-'));
    writeFileSync(join(dir, 'flows.zhar'), deflateSync(readFileSync(fixture('mitmproxy.har')), { level: 9 }));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it.each(['plain', 'zhar'])('%s: replays text, base64 bodies and form posts; skips flows without a response', async (kind) => {
    const replay = await startReplay({ file: kind === 'plain' ? fixture('mitmproxy.har') : join(dir, 'flows.zhar'), strict: true, log });
    try {
      expect(replay.entries).toBe(3);
      const subs = await request(replay.url).get('/api/v1/users/me/subscriptions');
      expect(subs.body.subscriptions[0].name).toBe('general');
      expect(subs.headers['content-encoding']).toBeUndefined();
      const avatar = await binary(request(replay.url).get('/user_avatars/2/abc.png?s=50'));
      expect(avatar.body).toEqual(PNG);
      const sent = await request(replay.url).post('/api/v1/messages').type('form').send({ to: '[11]', type: 'private', content: 'ping!' });
      expect(sent.body.id).toBe(77);
      expect(replay.misses()).toEqual([]);
    } finally {
      await replay.close();
    }
  });

  it('refuses a file that is not HAR, naming it', async () => {
    const bad = join(dir, 'bad.har');
    writeFileSync(bad, '{"entries": []}');
    await expect(startReplay({ file: bad, strict: false, log })).rejects.toThrow(`${bad} is not a HAR file (no log.entries)`);
    await expect(startReplay({ file: join(dir, 'absent.har'), strict: false, log })).rejects.toThrow(
      /cannot read .*absent\.har \(ENOENT\)/,
    );
  });
});

describe('a long poll answered again from its last recording', () => {
  it('waits as the recorded one did instead of answering at once (no busy loop), and close() does not wait for it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'zcs-events-'));
    const file = join(dir, 'events.har');
    const heartbeat = '{"result":"success","msg":"","events":[{"type":"heartbeat","id":0}]}';
    writeFileSync(
      file,
      JSON.stringify({
        log: {
          version: '1.2',
          creator: { name: 'test', version: '1' },
          entries: [
            {
              startedDateTime: '2024-05-02T09:00:00.000Z',
              time: 60_000,
              request: {
                method: 'GET',
                url: 'https://chat.example.com/api/v1/events?queue_id=q1&last_event_id=-1',
                httpVersion: 'HTTP/1.1',
                cookies: [],
                headers: [],
                queryString: [],
                headersSize: -1,
                bodySize: 0,
              },
              response: {
                status: 200,
                statusText: 'OK',
                httpVersion: 'HTTP/1.1',
                cookies: [],
                headers: [],
                content: { size: heartbeat.length, mimeType: 'application/json', text: heartbeat },
                redirectURL: '',
                headersSize: -1,
                bodySize: -1,
              },
              cache: {},
              timings: { send: 0, wait: 60_000, receive: 0 },
            },
          ],
        },
      }),
    );
    // The replay's debug lines say when a request was matched, and whether as a repeat.
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, cb) {
        lines.push(String(chunk));
        cb();
      },
    });
    const repeats = () => lines.filter((l) => l.includes('"msg":"replayed"') && l.includes('"repeat":true')).length;
    const replay = await startReplay({ file, strict: false, log: createLogger('debug', sink) });
    try {
      const path = '/api/v1/events?queue_id=q1&last_event_id=-1';
      const first = await request(replay.url).get(path);
      expect(first.body.events[0].type).toBe('heartbeat');
      const again = new AbortController();
      let answered = false;
      const pending = fetch(`${replay.url}${path}`, { signal: again.signal }).then(
        () => (answered = true),
        () => undefined,
      );
      await until('the repeat to be matched', () => (repeats() === 1 ? true : undefined));
      // A whole exchange on another connection after it: an answer at once would be here by now.
      expect((await request(replay.url).get('/api/v1/nothing')).status).toBe(502);
      expect(answered).toBe(false);
      again.abort();
      await pending;
      expect(answered).toBe(false);
      // close() with a long poll held does not wait for it.
      void fetch(`${replay.url}${path}`).catch(() => undefined);
      await until('the second repeat to be held', () => (repeats() === 2 ? true : undefined));
    } finally {
      await replay.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
