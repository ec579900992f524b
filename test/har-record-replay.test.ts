import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRecorder } from '../src/har/recorder.js';
import { startReplay, type Replay } from '../src/har/replay.js';
import { HAR_FLUSH_MS } from '../src/har/writer.js';
import { createShim } from '../src/index.js';
import { createLogger } from '../src/observability/logger.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { compileSchema } from './support/schema.js';
import { startShim, type RunningShim } from './support/shim.js';

const validateHar = compileSchema('har.schema.json');

const log = createLogger('silent');
const PASSWORD = 'Tr0ub4dor&3 horse/staple+battery';
const CSRF = 'Xq8pL2mN4bV6cZ1wE3rT5yU7iO9aS0dF';
const PRESENCE = '/api/v1/users/me/presence';
const FORM = 'application/x-www-form-urlencoded';

interface Answer {
  step: string;
  status: number;
  type: string | undefined;
  encoding: string | undefined;
  body: Buffer;
  /** Answers that carry a credential differ after redaction: compared by status only. */
  statusOnly?: boolean;
}

interface Call {
  auth?: string;
  cookie?: string;
  type?: string;
  body?: string | Buffer;
  headers?: Record<string, string>;
  statusOnly?: boolean;
}

async function call(base: string, method: 'GET' | 'POST', path: string, c: Call = {}): Promise<Answer> {
  let r = method === 'GET' ? request(base).get(path) : request(base).post(path);
  if (c.auth) r = r.set('Authorization', c.auth);
  if (c.cookie) r = r.set('Cookie', c.cookie);
  for (const [k, v] of Object.entries(c.headers ?? {})) r = r.set(k, v);
  if (c.type) r = r.set('Content-Type', c.type);
  if (c.body !== undefined) r = r.send(c.body);
  const res = await r.buffer(true).parse((stream, done) => {
    const chunks: Buffer[] = [];
    stream.on('data', (d: Buffer) => chunks.push(d));
    stream.on('end', () => done(null, Buffer.concat(chunks)));
  });
  return {
    step: `${method} ${path}`,
    status: res.status,
    type: res.headers['content-type'] as string | undefined,
    encoding: res.headers['content-encoding'] as string | undefined,
    body: res.body as Buffer,
    statusOnly: c.statusOnly,
  };
}

const json = (a: Answer) => JSON.parse(a.body.toString('utf8')) as Record<string, unknown>;

/** An answer in a form that is the same between a live run and its replay. */
function comparable(a: Answer): unknown {
  if (a.statusOnly) return { step: a.step, status: a.status };
  let body: unknown = a.body.toString('base64');
  if (a.type?.startsWith('application/json')) {
    // Ids are the shim's own (clock-based, P5): the same sequence gives other numbers.
    const { presence_last_update_id: _id, ...rest } = json(a);
    body = rest;
  }
  return { step: a.step, status: a.status, type: a.type, body };
}

function multipart(boundary: string, fields: Array<[string, string]>): string {
  return `${fields.map(([k, v]) => `--${boundary}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`).join('')}--${boundary}--\r\n`;
}

describe('record through the shim, replay the file (H1, H2)', () => {
  let fake: FakeZulip;
  let dir: string;
  let file: string;
  let auth10: string;
  let recorded: Answer[];
  let counter = 0;

  /** The client session; `change` moves the upstream between polls while recording. */
  async function session(base: string, change?: (step: number) => void): Promise<Answer[]> {
    const out: Answer[] = [];
    const add = (a: Answer) => {
      out.push(a);
      return a;
    };
    add(await call(base, 'GET', '/api/v1/server_settings'));
    add(await call(base, 'GET', '/api/v1/users', { auth: auth10 }));
    let poll = add(await call(base, 'POST', PRESENCE, { auth: auth10, type: FORM, body: 'status=active&last_update_id=-1' }));
    for (const step of [1, 2]) {
      change?.(step);
      poll = add(
        await call(base, 'POST', PRESENCE, {
          auth: auth10,
          type: FORM,
          body: `status=active&last_update_id=${String(json(poll).presence_last_update_id)}`,
        }),
      );
    }
    for (let i = 0; i < 3; i++) add(await call(base, 'GET', '/api/v1/counter'));
    add(await call(base, 'GET', '/test/big?kb=3'));
    add(await call(base, 'GET', '/test/chunked?n=3&gap_ms=1'));
    add(await call(base, 'GET', '/api/v1/gzipped'));
    add(await call(base, 'GET', '/api/v1/users', { auth: 'Basic bm9wZTpub3Bl' }));
    // Credentials in every place H1 names.
    add(
      await call(base, 'POST', '/api/v1/fetch_api_key', {
        type: FORM,
        body: new URLSearchParams({ username: 'user10@zulip.example.com', password: PASSWORD }).toString(),
        statusOnly: true,
      }),
    );
    add(
      await call(base, 'POST', '/api/v1/fetch_api_key', {
        type: 'multipart/form-data; boundary=zzB0undary',
        body: multipart('zzB0undary', [
          ['username', 'user11@zulip.example.com'],
          ['password', PASSWORD],
        ]),
        statusOnly: true,
      }),
    );
    add(
      await call(base, 'POST', '/api/v1/settings', {
        auth: fake.auth(12),
        type: 'application/json',
        body: JSON.stringify({ api_key: fake.user(13).api_key, full_name: 'x' }),
        statusOnly: true,
      }),
    );
    add(
      await call(base, 'GET', `/test/echo?api_key=${fake.user(14).api_key}&password=${encodeURIComponent(PASSWORD)}`, {
        auth: fake.auth(11),
        cookie: `sessionid=${fake.user(15).api_key}; csrftoken=${CSRF}`,
        headers: { 'X-CSRFToken': CSRF },
        statusOnly: true,
      }),
    );
    return out;
  }

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'zcs-har-'));
    file = join(dir, 'session.har');
    fake = await startFake({ era: '2.1', users: 6 });
    auth10 = fake.auth(10);
    fake.report(11, 'idle');
    fake.override = (req, res) => {
      const path = (req.url ?? '').split('?')[0];
      const send = (body: unknown, headers: Record<string, string> = {}) => {
        const b = Buffer.from(JSON.stringify(body));
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': b.length, ...headers });
        res.end(b);
        return true;
      };
      if (path === '/api/v1/counter') return send({ result: 'success', msg: '', n: ++counter });
      if (path === '/api/v1/fetch_api_key')
        return send({ result: 'success', msg: '', api_key: fake.user(16).api_key, email: fake.user(16).email });
      if (path === '/api/v1/settings') return send({ result: 'success', msg: '' });
      if (path === '/api/v1/gzipped') {
        const b = gzipSync(JSON.stringify({ result: 'success', msg: '', zipped: 'yes'.repeat(50) }));
        res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip', 'content-length': b.length });
        res.end(b);
        return true;
      }
      return false;
    };

    const recorder = await startRecorder({ upstream: fake.url, file, log, flushMs: 20 });
    const shim = await startShim(recorder.url, { presence: { coalesceMs: 0 } }, { upstreamId: fake.url });
    try {
      recorded = await session(shim.url, (step) => {
        fake.advance(120);
        if (step === 1) fake.report(12, 'active');
        else fake.report(11, 'active', 'ZulipMobile');
      });
    } finally {
      await shim.close();
      await recorder.close();
    }
  });

  afterAll(async () => {
    await fake.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the live session did what it should (so the comparison means something)', () => {
    expect(recorded.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 401, 200, 200, 200, 200]);
    const [full, delta1, delta2] = [json(recorded[2]!), json(recorded[3]!), json(recorded[4]!)];
    expect(Object.keys(full.presences as object).sort()).toEqual(['10', '11']);
    expect(Object.keys(delta1.presences as object).sort()).toEqual(['10', '12']);
    expect(Object.keys(delta2.presences as object).sort()).toEqual(['10', '11']);
    expect(recorded.slice(5, 8).map((a) => json(a).n)).toEqual([1, 2, 3]);
    expect(json(recorded[10]!).zipped).toBe('yes'.repeat(50));
  });

  it('writes a HAR 1.2 file that validates, one entry per upstream exchange, with the real upstream in the URLs', () => {
    const har = JSON.parse(readFileSync(file, 'utf8')) as { log: { entries: Array<{ request: { url: string; method: string } }> } };
    const ok = validateHar(har);
    expect(ok ? [] : validateHar.errors).toEqual([]);
    const urls = har.log.entries.map((e) => `${e.request.method} ${e.request.url}`);
    for (const u of urls) expect(u).toContain(`${fake.url}/`);
    expect(urls.filter((u) => u.endsWith(PRESENCE))).toHaveLength(3);
    expect(urls.filter((u) => u.endsWith('/api/v1/counter'))).toHaveLength(3);
    expect(urls).toContain(`GET ${fake.url}/test/big?kb=3`);
  });

  it('keeps bodies: text as text, binary as base64, gzip decoded', () => {
    const har = JSON.parse(readFileSync(file, 'utf8')) as {
      log: {
        entries: Array<{
          request: { url: string };
          response: { content: { text?: string; encoding?: string; size: number; compression?: number } };
        }>;
      };
    };
    const by = (suffix: string) => har.log.entries.find((e) => e.request.url.endsWith(suffix))!.response.content;
    expect(by('/test/big?kb=3')).toMatchObject({ encoding: 'base64', size: 3072 });
    expect(Buffer.from(by('/test/big?kb=3').text!, 'base64')).toEqual(Buffer.alloc(3072, 120));
    expect(by('/test/chunked?n=3&gap_ms=1')).toMatchObject({ text: 'chunk 0\nchunk 1\nchunk 2\n' });
    expect(by('/api/v1/gzipped').encoding).toBeUndefined();
    expect(JSON.parse(by('/api/v1/gzipped').text!)).toMatchObject({ zipped: 'yes'.repeat(50) });
    expect(by('/api/v1/gzipped').compression).toBeLessThan(0);
  });

  it('never writes a credential of the test accounts, in any spelling', () => {
    const text = readFileSync(file, 'utf8');
    const secrets = new Set<string>([
      PASSWORD,
      encodeURIComponent(PASSWORD),
      new URLSearchParams({ p: PASSWORD }).toString().slice(2),
      CSRF,
    ]);
    for (const u of fake.users) {
      secrets.add(u.api_key);
      secrets.add(encodeURIComponent(u.api_key));
      secrets.add(Buffer.from(`${u.email}:${u.api_key}`).toString('base64'));
      secrets.add(Buffer.from(u.api_key).toString('base64'));
    }
    for (const s of secrets) expect(text.includes(s), `the file contains ${s.slice(0, 4)}…`).toBe(false);
    expect(text).toMatch(/"Basic \[redacted-\d+\]"/);
    expect(text).toMatch(/sessionid=\[redacted-\d+\]; csrftoken=\[redacted-\d+\]/);
    expect(text).toMatch(/\\"api_key\\":\\"\[redacted-\d+\]\\"/);
  });

  it('gives the same secret the same placeholder across the file', () => {
    const har = JSON.parse(readFileSync(file, 'utf8')) as {
      log: { entries: Array<{ request: { headers: Array<{ name: string; value: string }> } }> };
    };
    const auths = har.log.entries.flatMap((e) =>
      e.request.headers.filter((h) => h.name.toLowerCase() === 'authorization').map((h) => h.value),
    );
    // user 10 (most requests), 11 (echo), 12 (settings), the 401 one: four callers, four placeholders.
    expect(new Set(auths).size).toBe(4);
    const csrf = har.log.entries.flatMap((e) =>
      e.request.headers.filter((h) => h.name.toLowerCase() === 'x-csrftoken').map((h) => h.value),
    );
    const cookie = har.log.entries.flatMap((e) => e.request.headers.filter((h) => h.name.toLowerCase() === 'cookie').map((h) => h.value));
    expect(cookie[0]).toContain(`csrftoken=${csrf[0]}`);
  });

  describe('replayed', () => {
    let replay: Replay;
    let shim: RunningShim;
    beforeAll(async () => {
      replay = await startReplay({ file, strict: true, log });
      shim = await startShim(replay.url, { presence: { coalesceMs: 0 } }, { upstreamId: `replay:${file}` });
    });
    afterAll(async () => {
      await shim.close();
      await replay.close();
    });

    it('answers the same request sequence with the same answers, without the upstream', async () => {
      const before = fake.stats.requests.size;
      fake.resetStats();
      const replayed = await session(shim.url);
      expect(replayed.map(comparable)).toEqual(recorded.map(comparable));
      expect(fake.stats.requests.size).toBe(0);
      expect(replay.misses()).toEqual([]);
      expect(before).toBeGreaterThan(0);
      // Presence deltas come out of the replay as they did live: full, then changes only.
      expect(Object.keys(json(replayed[3]!).presences as object).sort()).toEqual(['10', '12']);
      // Replayed bodies are sent decoded, with their length recomputed.
      expect(replayed[10]!.encoding).toBeUndefined();
    });

    it('repeats the last recorded answer once the recorded ones are used up', async () => {
      const more = await call(shim.url, 'GET', '/api/v1/counter');
      expect(json(more).n).toBe(3);
    });

    it('answers a request it has no recording for with 502 REPLAY_MISS naming it', async () => {
      const res = await request(shim.url).post('/api/v1/messages?x=1').type('form').send('content=hi&api_key=not-shown');
      expect(res.status).toBe(502);
      expect(res.body).toEqual({
        result: 'error',
        msg: 'No recorded answer for POST /api/v1/messages?x=1 with form body api_key=[redacted]&content=hi',
        code: 'REPLAY_MISS',
      });
      expect(replay.misses()).toEqual(['POST /api/v1/messages?x=1 with form body api_key=[redacted]&content=hi']);
    });
  });
});

/**
 * X8 as the shim is started (record.har, through the embedding API and so open-upstream.ts): an
 * exchange reaches the file on disk, as valid HAR, by the periodic flush while the shim keeps
 * running, not only when it closes.
 */
describe('recording reaches the file while the shim runs (X8)', () => {
  it('writes an exchange by the periodic flush, before the shim closes', async () => {
    const fake = await startFake({ era: '2.1' });
    const dir = mkdtempSync(join(tmpdir(), 'zcs-har-flush-'));
    const file = join(dir, 'live.har');
    const shim = await createShim({ upstream: { url: fake.url }, record: { har: file }, log: { level: 'silent' } });
    try {
      const { url } = await shim.listen(0, '127.0.0.1');
      /** The request URLs in the file now; undefined while it is not whole JSON. */
      const urlsOnDisk = (): string[] | undefined => {
        try {
          const har = JSON.parse(readFileSync(file, 'utf8')) as { log: { entries: Array<{ request: { url: string } }> } };
          return har.log.entries.map((e) => e.request.url);
        } catch {
          return undefined;
        }
      };
      expect(urlsOnDisk()).toEqual([]); // the file is valid from the start

      const res = await fetch(`${url}/test/echo?flushed=1`);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      const answered = performance.now();
      // Polled while the shim runs: without the periodic flush the entry would reach the file
      // only at close. The margin is for a busy machine's fsync; har-writer.test.ts pins the
      // interval itself.
      const deadline = answered + HAR_FLUSH_MS + 10_000;
      while (!urlsOnDisk()?.includes(`${fake.url}/test/echo?flushed=1`) && performance.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(urlsOnDisk()).toContain(`${fake.url}/test/echo?flushed=1`);
      const har = JSON.parse(readFileSync(file, 'utf8')) as unknown;
      expect(validateHar(har) ? [] : validateHar.errors).toEqual([]);
      // Still running: it answers the next request.
      const next = await fetch(`${url}/test/echo?flushed=2`);
      await next.arrayBuffer();
      expect(next.status).toBe(200);
    } finally {
      // The directory is left for the suite's credential check of HAR files, which removes it.
      await shim.close();
      await fake.stop();
    }
  });
});
