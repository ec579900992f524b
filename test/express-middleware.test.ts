import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import express4 from 'express4';
import express5 from 'express';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../src/index.js';
import { BodyConsumedError, zulipCompatShim, type ZulipCompatShimMiddleware } from '../src/express.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { APP_AGENT, OTHER_AGENT } from './support/mobile-app.js';

/**
 * `import { zulipCompatShim } from 'zulip-compat-shim/express'` in an Express app, 4 and 5, as
 * its users mount it: at `/` or a path, answering everything (the default) or only what it
 * intercepts (`passThrough: false`), before a body parser (and what happens after one).
 */

type App = ReturnType<typeof express5>;
const EXPRESSES: Array<[string, () => App]> = [
  ['Express 5', () => express5()],
  ['Express 4', () => express4() as unknown as App],
];

describe.each(EXPRESSES)('%s', (_name, makeApp) => {
  let fake: FakeZulip;
  const middlewares: ZulipCompatShimMiddleware[] = [];
  const shim = (o: Parameters<typeof zulipCompatShim>[0] = {}) => {
    const m = zulipCompatShim({ upstream: { url: fake.url }, log: { level: 'silent' }, ...o });
    middlewares.push(m);
    return m;
  };
  const presence = (app: App, path = '/api/v1/users/me/presence') =>
    request(app).post(path).set('Authorization', fake.auth(10)).type('form').send('status=active&last_update_id=-1');

  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
  });
  afterAll(async () => {
    for (const m of middlewares) await m.close();
    await fake.stop();
  });

  it('mounted at /: answers the modern API, passes everything else to the upstream, and its own /healthz', async () => {
    const app = makeApp();
    app.get('/app/route', (_req, res) => {
      res.json({ app: true });
    });
    app.use(shim());
    const poll = await presence(app);
    expect(poll.status).toBe(200);
    expect(poll.body).toHaveProperty('presence_last_update_id');
    expect(poll.headers['x-request-id']).toBeTruthy();
    const echo = await request(app).put('/test/echo?a=1').type('form').send('x=1');
    expect(echo.status).toBe(200);
    expect(echo.body).toMatchObject({ method: 'PUT', url: '/test/echo?a=1' });
    expect(Buffer.from((echo.body as { body: string }).body, 'base64').toString()).toBe('x=1');
    expect((await request(app).get('/healthz')).body).toMatchObject({ status: 'alive' });
    // Routes before it are the app's.
    expect((await request(app).get('/app/route')).body).toEqual({ app: true });
  });

  it('passThrough: false answers only the intercepted endpoints and calls next() for the rest', async () => {
    const app = makeApp();
    app.use(shim({ passThrough: false }));
    app.use(express5.json());
    app.all('/test/echo', (req, res) => {
      res.json({ fromApp: true, body: req.body as unknown });
    });
    app.use((_req, res) => {
      res.status(404).json({ fromApp: 404 });
    });
    const poll = await presence(app);
    expect(poll.status).toBe(200);
    expect(poll.body).toHaveProperty('presence_last_update_id');
    const before = fake.stats.requests.get('POST /test/echo') ?? 0;
    const echo = await request(app).post('/test/echo').send({ a: 1 });
    expect(echo.body).toEqual({ fromApp: true, body: { a: 1 } });
    expect(fake.stats.requests.get('POST /test/echo') ?? 0).toBe(before);
    expect((await request(app).get('/healthz')).body).toEqual({ fromApp: 404 });
    expect((await request(app).get('/api/v1/messages')).body).toEqual({ fromApp: 404 });
  });

  it('mounted at a path: the upstream sees the path below the mount point', async () => {
    const app = makeApp();
    app.use('/zulip', shim());
    expect((await presence(app, '/zulip/api/v1/users/me/presence')).body).toHaveProperty('presence_last_update_id');
    expect((await request(app).get('/zulip/test/echo?q=2')).body).toMatchObject({ url: '/test/echo?q=2' });
  });

  describe('after global express.json() and express.urlencoded() (as most apps start)', () => {
    const parsedFirst = () => {
      const app = makeApp();
      app.use(express5.json());
      app.use(express5.urlencoded({ extended: true }));
      app.use(shim());
      app.use((err: Error, _req: unknown, res: { status(n: number): { json(b: unknown): void } }, _next: unknown) => {
        res.status(500).json({ name: err.name, message: err.message });
      });
      return app;
    };
    const seenAt = (path: string) => fake.seen.filter((r) => r.url.split('?')[0] === path).at(-1)!;

    it('serves presence and register from the parsed body', async () => {
      const app = parsedFirst();
      const poll = await presence(app);
      expect(poll.status).toBe(200);
      expect(poll.body).toHaveProperty('presence_last_update_id');
      const register = (to: App) =>
        request(to)
          .post('/api/v1/register')
          .set('Authorization', fake.auth(10))
          .type('form')
          .send({ slim_presence: 'true', fetch_event_types: '["presence","realm_user"]' });
      const registered = await register(app);
      expect(registered.status).toBe(200);
      expect(Number.isSafeInteger(registered.body.presence_last_update_id)).toBe(true);
      // As a shim mounted before the parsers answers the same form: slim (by id) presences, the users.
      const unparsed = makeApp();
      unparsed.use(shim());
      const reference = await register(unparsed);
      expect(Object.keys(registered.body.presences).sort()).toEqual(Object.keys(reference.body.presences).sort());
      expect(Object.keys(registered.body.presences).every((k) => /^\d+$/.test(k))).toBe(true);
      expect(registered.body.realm_users).toHaveLength(fake.humans().length);
      // The parameters reached the upstream as sent: only the asked event types were fetched.
      const upstreamForm = new URLSearchParams(seenAt('/api/v1/register').body.toString());
      expect(JSON.parse(upstreamForm.get('fetch_event_types')!)).toEqual(expect.arrayContaining(['presence', 'realm_user']));
      // presence: the client's status reached the upstream (its report of user 10).
      const next = await request(app)
        .post('/api/v1/users/me/presence')
        .set('Authorization', fake.auth(10))
        .type('form')
        .send(`status=idle&last_update_id=${poll.body.presence_last_update_id}`);
      expect(next.status).toBe(200);
      expect(new URLSearchParams(seenAt('/api/v1/users/me/presence').body.toString()).get('status')).toBe('idle');
    });

    it('passes a form POST and a JSON POST through with the body intact and a Content-Length of its own', async () => {
      const app = parsedFirst();
      const form = 'type=stream&to=%5B7%5D&topic=caf%C3%A9%20%26%20tea&content=a%2Bb%3Dc&content2=x&content2=y';
      const passed = await request(app).post('/test/echo?f=1').type('form').send(form);
      expect(passed.status).toBe(200);
      const atUpstream = seenAt('/test/echo');
      expect(new URLSearchParams(atUpstream.body.toString())).toEqual(new URLSearchParams(form));
      expect(atUpstream.headers['content-length']).toBe(String(atUpstream.body.length));
      expect(atUpstream.headers['transfer-encoding']).toBeUndefined();
      expect(atUpstream.url).toBe('/test/echo?f=1');

      const json = { narrow: [{ operator: 'channel', operand: 'café' }], n: 3, ok: true };
      const passedJson = await request(app).post('/test/echo').send(json);
      expect(passedJson.status).toBe(200);
      const jsonAtUpstream = seenAt('/test/echo');
      expect(JSON.parse(jsonAtUpstream.body.toString())).toEqual(json);
      expect(jsonAtUpstream.headers['content-type']).toMatch(/^application\/json/);
      expect(jsonAtUpstream.headers['content-length']).toBe(String(jsonAtUpstream.body.length));
    });

    it('a gzipped form the parser inflated goes on inflated, without its Content-Encoding', async () => {
      const app = parsedFirst();
      // Sent as bytes (supertest would serialise a Buffer given with a form type).
      const server = app.listen(0, '127.0.0.1');
      await once(server, 'listening');
      try {
        const passed = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/test/echo`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-encoding': 'gzip' },
          body: gzipSync('a=1&b=two'),
        });
        expect(await passed.json()).toMatchObject({ method: 'POST' });
      } finally {
        server.close();
      }
      const atUpstream = seenAt('/test/echo');
      expect(atUpstream.body.toString()).toBe('a=1&b=two');
      expect(atUpstream.headers['content-encoding']).toBeUndefined();
    });

    it('a body read and not rebuildable (multipart, a raw stream) is a BodyConsumedError', async () => {
      const app = makeApp();
      // A reader that consumes the stream and leaves nothing in req.body.
      app.use((req, _res, next) => {
        req.on('end', () => next());
        req.resume();
      });
      app.use(shim());
      app.use((err: Error, _req: unknown, res: { status(n: number): { json(b: unknown): void } }, _next: unknown) => {
        res.status(500).json({ name: err.name, message: err.message });
      });
      const poll = await presence(app);
      expect(poll.status).toBe(500);
      expect(poll.body).toMatchObject({ name: 'BodyConsumedError', message: expect.stringMatching(/cannot be rebuilt/) });
      expect(new BodyConsumedError('x').status).toBe(500);
    });
  });

  it('an unreadable HAR is given to next(); invalid options throw at once', async () => {
    const app = makeApp();
    const broken = zulipCompatShim({ replay: { har: '/nonexistent.har' }, log: { level: 'silent' } });
    middlewares.push(broken);
    app.use(broken);
    app.use((err: Error, _req: unknown, res: { status(n: number): { json(b: unknown): void } }, _next: unknown) => {
      res.status(500).json({ name: err.name });
    });
    expect((await request(app).get('/api/v1/users')).body).toEqual({ name: 'ConfigError' });
    expect(() => zulipCompatShim({ upstream: { url: fake.url }, server: { port: -1 } })).toThrow(ConfigError);
  });
});

describe('the middleware’s log', () => {
  let fake: FakeZulip;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
  });
  afterAll(() => fake.stop());

  it.each([
    ['quiet by default: no access line', {}, 0],
    ['access lines when asked (log.access on)', { log: { access: 'on' as const } }, 2],
  ])('%s', async (_name, options, expected) => {
    const lines: string[] = [];
    const middleware = zulipCompatShim({ upstream: { url: fake.url }, logDestination: { write: (l) => void lines.push(l) }, ...options });
    try {
      const app = express5();
      app.use(middleware);
      await request(app).post('/api/v1/users/me/presence').set('Authorization', fake.auth(10)).type('form').send('status=active');
      await request(app).get('/test/echo');
      expect(lines.filter((l) => l.includes('"msg":"request completed"'))).toHaveLength(expected);
    } finally {
      await middleware.close();
    }
  });
});

describe('passThrough: false with the mobile app’s flag (M1, M2)', () => {
  let fake: FakeZulip;
  let middleware: ZulipCompatShimMiddleware;
  beforeAll(async () => {
    fake = await startFake({ era: '7.0' });
    middleware = zulipCompatShim({ upstream: { url: fake.url }, log: { level: 'silent' }, app: { featureLevel: 277 }, passThrough: false });
  });
  afterAll(async () => {
    await middleware.close();
    await fake.stop();
  });

  it('answers the app’s translated requests itself, and hands the same request from another client on', async () => {
    const app = express5();
    app.use(middleware);
    app.use((_req, res) => {
      res.status(404).json({ fromApp: 404 });
    });
    const send = (agent: string) =>
      request(app)
        .post('/api/v1/messages')
        .set('User-Agent', agent)
        .set('Authorization', fake.auth(10))
        .type('form')
        .send({ type: 'channel', to: '7', topic: 'lunch', content: 'hi' });
    const fromApp = await send(APP_AGENT);
    expect(fromApp.body).not.toEqual({ fromApp: 404 });
    const seen = fake.seen.filter((s) => s.url.split('?')[0] === '/api/v1/messages').at(-1)!;
    expect(new URLSearchParams(seen.body.toString()).get('type')).toBe('stream');
    expect((await send(OTHER_AGENT)).body).toEqual({ fromApp: 404 });
  });
});
