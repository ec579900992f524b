import http from 'node:http';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { isLongPoll, routeLabel } from '../src/http/api-routes.js';
import { removeDotSegments, routingPath } from '../src/http/routing-path.js';
import { INTERCEPTED, routeOf } from '../src/routes.js';
import { realmHostMatcher } from '../src/realm-hosts.js';
import { failing, startFake, type FakeZulip } from './support/fake-zulip.js';
import { sendRaw } from './support/http-client.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * X6 and X2's allow-list on raw sockets: every odd request gets a Zulip-shaped answer, no
 * spelling of a path skips interception, and a host outside --realm-hosts costs no upstream call.
 */

const upstreamCalls = (fake: FakeZulip) => [...fake.stats.requests.values()].reduce((a, b) => a + b, 0);

/** One request with exactly this target and these headers (no URL normalisation on the way). */
function get(
  base: string,
  path: string,
  headers: Record<string, string> = {},
  agent: http.Agent | false = false,
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, method: 'GET', path, headers, agent }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * A client that writes its whole request, body included, before reading anything: resolves with
 * what the server sent, or the socket error it met.
 */
function writeAllThenRead(base: string, head: string, body: Buffer, chunked: boolean): Promise<{ bytes: string; error?: string }> {
  const url = new URL(base);
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let error: string | undefined;
    const socket = net.connect(Number(url.port), url.hostname);
    socket.pause(); // nothing is read until the whole body is written
    socket.on('error', (e: NodeJS.ErrnoException) => (error ??= e.code ?? e.message));
    socket.on('close', () => resolve({ bytes: Buffer.concat(chunks).toString('latin1'), ...(error ? { error } : {}) }));
    socket.write(head);
    const payload = chunked ? Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]) : body;
    socket.write(payload, () => {
      socket.on('data', (c: Buffer) => chunks.push(c));
      socket.resume();
    });
  });
}

describe('routing path (X6): what the upstream router sees', () => {
  it.each([
    ['/api/v1/users/me', '/api/v1/users/me'],
    ['/api/v1/users/../users/me', '/api/v1/users/me'],
    ['/api/v1/users/%2e%2e/users/me', '/api/v1/users/me'],
    ['/api/v1/users/%2E%2E/users/me', '/api/v1/users/me'],
    ['/api/v1/users/.%2E/users/me', '/api/v1/users/me'],
    ['/api/v1/users/%2e./users/me', '/api/v1/users/me'],
    ['/api/v1/./users/me', '/api/v1/users/me'],
    ['/api/v1/%2e/users/me', '/api/v1/users/me'],
    ['/api/v1//users/me', '/api/v1/users/me'],
    ['/api/v1/users%2Fme', '/api/v1/users/me'],
    ['/api/v1/users/m%65', '/api/v1/users/me'],
    ['/api/v1/users/me?x=/../y', '/api/v1/users/me'],
    ['http://chat.example.com/api/v1/users/me', '/api/v1/users/me'],
    ['/../../api/v1/users/me', '/api/v1/users/me'],
    ['/api/v1/users/me/..', '/api/v1/users/'],
    ['/api/v1/users/me/.', '/api/v1/users/me/'],
    ['', '/'],
  ])('%s → %s', (target, path) => {
    expect(routingPath(target)).toBe(path);
  });

  it('RFC 3986 §5.2.4 examples', () => {
    expect(removeDotSegments('/a/b/c/./../../g')).toBe('/a/g');
    expect(removeDotSegments('/mid/content=5/../6')).toBe('/mid/6');
  });

  it("routes are decided once, on that path; own paths are the shim's", () => {
    expect(routeOf('POST', '/api/v1/users/%2e%2e/users/me/presence').kind).toBe('intercepted');
    expect(routeOf('GET', '/api/v1/users/me').kind).toBe('intercepted');
    expect(routeOf('HEAD', '/api/v1/users/me').kind).toBe('upstream');
    expect(routeOf('GET', '/api/v1/users/me/subscriptions').kind).toBe('upstream');
    expect(routeOf('POST', '/healthz').kind).toBe('own');
    expect(routeOf('GET', '/x/../metrics?a')).toEqual({ kind: 'own', path: '/metrics', label: 'other', longPoll: false });
  });

  it('a request no router saw (the shim’s own calls, the recorder’s, a replay) reads as the router reads it', () => {
    const segment = fc.constantFrom('api', 'v1', 'json', 'events', '%65vents', 'messages', 'users', 'me', '', '.', '..', 'x');
    fc.assert(
      fc.property(
        fc.constantFrom('GET', 'POST', 'DELETE'),
        fc.array(segment, { maxLength: 6 }),
        fc.constantFrom('', '?queue_id=1'),
        (method, segments, query) => {
          const target = `/${segments.join('/')}${query}`;
          const route = routeOf(method, target);
          expect(isLongPoll(method, target)).toBe(route.longPoll);
          if (route.kind !== 'own') expect(routeLabel(target)).toBe(route.label);
        },
      ),
      { numRuns: 3000 },
    );
  });

  it.each([
    ['GET', '/api/v1/events?queue_id=1', 'events', true],
    // The upstream's router holds these as long polls too: so does the route (its own pool, T1).
    ['GET', '/api/v1//events', 'events', true],
    ['GET', '/json/x/../events', 'events', true],
    ['GET', '/api/v1/%65vents', 'events', true],
    ['DELETE', '/api/v1/events', 'events', false],
    ['GET', '/api/v1/messages/12/reactions', 'messages', false],
    ['POST', '/api/v1/users/me/presence', 'presence', false],
    ['GET', '/api/v1/streams', 'other', false],
    ['GET', '/healthz', 'other', false],
  ] as const)('%s %s: label %s, long poll %s, decided with the route', (method, target, label, longPoll) => {
    const route = routeOf(method, target);
    expect({ label: route.label, longPoll: route.longPoll }).toEqual({ label, longPoll });
  });

  it('the compiled table routes as a plain reading of INTERCEPTED would, for any path', () => {
    // The reference: an exact entry first, else the first `{name}` entry whose segments fit (one non-empty segment each).
    const reference = (method: string, path: string) => {
      const exact = INTERCEPTED.get(`${method} ${path}`);
      if (exact) return exact;
      for (const [key, handler] of INTERCEPTED) {
        const [m, p] = key.split(' ') as [string, string];
        const want = p.split('/');
        const got = path.split('/');
        if (m === method && want.length === got.length && want.every((w, i) => (w.startsWith('{') ? got[i] !== '' : w === got[i])))
          return handler;
      }
      return undefined;
    };
    // Paths near the table's own: one of its paths with `{name}` filled, then maybe one segment changed, added or dropped.
    const templates = [...INTERCEPTED.keys()].map((k) => k.split(' ')[1]!.slice(1).split('/'));
    const segment = fc.constantFrom('api', 'v1', 'json', 'users', 'me', 'presence', 'register', '12', 'a@b.c', '', '..', 'x');
    const nearPath = fc
      .tuple(fc.constantFrom(...templates), segment, fc.nat(6), segment, fc.constantFrom('keep', 'change', 'add', 'drop'))
      .map(([template, fill, at, other, how]) => {
        const segments = template.map((s) => (s.startsWith('{') ? fill : s));
        const i = at % (segments.length + 1);
        if (how === 'change') segments[i] = other;
        else if (how === 'add') segments.splice(i, 0, other);
        else if (how === 'drop') segments.splice(i, 1);
        return segments;
      });
    fc.assert(
      fc.property(fc.constantFrom('GET', 'POST', 'HEAD', 'PATCH'), nearPath, (method, segments) => {
        const path = routingPath(`/${segments.join('/')}`);
        const route = routeOf(method, path);
        const want = reference(method, path);
        if (route.kind === 'own') return;
        expect(route.kind === 'intercepted' ? route.handler : undefined).toBe(want);
      }),
      { numRuns: 2000 },
    );
  });
});

describe('--realm-hosts matching', () => {
  const admits = realmHostMatcher(['chat.example.com', '*.example.org', 'local:8443']);
  it.each([
    ['chat.example.com', true],
    ['CHAT.example.com:443', true],
    ['a.example.org', true],
    ['a.b.example.org', true],
    ['example.org', false],
    ['evil-example.org', false],
    ['chat.example.com.evil.test', false],
    ['local:8443', true],
    ['local', false],
    ['', false],
    [undefined, false],
  ])('%s → %s', (host, ok) => {
    expect(admits(host)).toBe(ok);
  });
  it('an empty list admits every host', () => {
    expect(realmHostMatcher([])('anything')).toBe(true);
  });
});

describe('odd requests on raw sockets (X6)', () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url);
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });

  it.each([['HTTP/1.1'], ['HTTP/1.0']])("no Host (%s) → 400 in Zulip's shape, no upstream call", async (version) => {
    const before = upstreamCalls(fake);
    const a = await sendRaw(shim.url, Buffer.from(`GET /api/v1/users/me ${version}\r\n\r\n`), 5_000);
    expect(a.status).toBe(400);
    expect(a.headers['content-type']).toBe('application/json');
    expect(JSON.parse(a.body.toString())).toEqual({ result: 'error', msg: expect.stringMatching(/Host/), code: 'BAD_REQUEST' });
    expect(upstreamCalls(fake)).toBe(before);
  });

  it('no Host still reaches /healthz', async () => {
    const a = await sendRaw(shim.url, Buffer.from('GET /healthz HTTP/1.0\r\n\r\n'), 5_000);
    expect(a.status).toBe(200);
  });

  it.each([
    ['declared length', false],
    ['chunked', true],
  ])('a 50 MB body (%s) over the limit: the 413 JSON is read by a client that writes it all first', async (_name, chunked) => {
    const body = Buffer.alloc(50 * 1024 * 1024, 'a');
    const head = [
      'POST /api/v1/users/me/presence HTTP/1.1',
      `Host: chat.example.com`,
      'Content-Type: application/x-www-form-urlencoded',
      chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${body.length}`,
      '',
      '',
    ].join('\r\n');
    const { bytes, error } = await writeAllThenRead(shim.url, head, body, chunked);
    expect(error).toBeUndefined();
    expect(bytes).toMatch(/^HTTP\/1\.1 413 /);
    const json = bytes.slice(bytes.indexOf('\r\n\r\n') + 4);
    expect(JSON.parse(json)).toMatchObject({ result: 'error', code: 'BAD_REQUEST' });
  });

  it.each([
    '/api/v1/users/../users/me',
    '/api/v1/users/%2e%2e/users/me',
    '/api/v1/users/%2E%2E/users/me',
    '/api/v1/users/.%2e/users/me',
    '/api/v1//users/me',
    '/api/v1/./users/me',
  ])('GET %s is the own profile, backfilled (U2), asked upstream by its plain path', async (path) => {
    fake.resetStats();
    const a = await get(shim.url, path, { host: 'chat.example.com', authorization: fake.auth(10) });
    expect(a.status).toBe(200);
    expect(a.headers['x-zulip-compat-backfilled']).toMatch(/role/);
    expect(JSON.parse(a.body)).toMatchObject({ role: expect.any(Number), is_owner: expect.any(Boolean) });
    expect(fake.stats.requests.get('GET /api/v1/users/me')).toBe(1);
  });

  it('POST …/users/%2e%2e/users/me/presence is presence, in the modern format', async () => {
    const url = new URL(shim.url);
    const answer = await new Promise<string>((resolve, reject) => {
      const req = http.request(
        {
          host: url.hostname,
          port: url.port,
          method: 'POST',
          path: '/api/v1/users/%2e%2e/users/me/presence',
          headers: { host: 'chat.example.com', authorization: fake.auth(10), 'content-type': 'application/x-www-form-urlencoded' },
          agent: false,
        },
        (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve(body));
        },
      );
      req.on('error', reject);
      req.end('status=active&last_update_id=-1');
    });
    expect(JSON.parse(answer)).toMatchObject({ presence_last_update_id: expect.any(Number) });
  });
});

describe('--realm-hosts (X2): other hosts get a 400 with no upstream call', () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  beforeAll(async () => {
    fake = await startFake({ era: '5.0' });
    shim = await startShim(fake.url, { server: { realmHosts: ['chat.example.com', '*.example.org'] } });
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });

  it.each([['/api/v1/server_settings'], ['/api/v1/users/me'], ['/api/v1/messages'], ['/']])(
    'GET %s with 1,000 made-up hosts: 400s, no upstream call',
    async (path) => {
      const before = upstreamCalls(fake);
      // 50 kept-alive connections, each carrying a different Host on every request: a flood of
      // realms costs no TCP set-up per request here, so the test holds on a busy machine.
      const agent = new http.Agent({ keepAlive: true, maxSockets: 50 });
      try {
        const answers = await Promise.all(Array.from({ length: 1000 }, (_, i) => get(shim.url, path, { host: `h${i}.evil.test` }, agent)));
        for (const a of answers) {
          expect(a.status).toBe(400);
          expect(JSON.parse(a.body)).toMatchObject({ result: 'error', code: 'BAD_REQUEST' });
        }
      } finally {
        agent.destroy();
      }
      expect(upstreamCalls(fake)).toBe(before);
    },
  );

  it('a WebSocket upgrade with a made-up host: 400, no upstream call', async () => {
    const before = upstreamCalls(fake);
    const a = await sendRaw(
      shim.url,
      Buffer.from(
        'GET /sockjs/websocket HTTP/1.1\r\nHost: evil.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
      ),
      5_000,
    );
    expect(a.status).toBe(400);
    expect(JSON.parse(a.body.toString())).toMatchObject({ result: 'error', code: 'BAD_REQUEST' });
    expect(upstreamCalls(fake)).toBe(before);
  });

  it.each([
    ['a request Node cannot parse', 'GET / HTTP/1.1\r\nHost chat.example.com\r\n\r\n', 400],
    ['a header block past the limit', `GET / HTTP/1.1\r\nHost: chat.example.com\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431],
    ['CONNECT', 'CONNECT chat.example.com:443 HTTP/1.1\r\nHost: chat.example.com:443\r\n\r\n', 405],
  ])("%s: answered in Zulip's shape on the socket (E2), no upstream call", async (_what, raw, status) => {
    const before = upstreamCalls(fake);
    const a = await sendRaw(shim.url, Buffer.from(raw), 5_000);
    expect(a.status).toBe(status);
    expect(JSON.parse(a.body.toString())).toMatchObject({ result: 'error', code: 'BAD_REQUEST' });
    expect(upstreamCalls(fake)).toBe(before);
  });

  it("listed hosts go through; the shim's own paths answer any host", async () => {
    // /readyz asks the upstream as the first listed realm, not as the prober's host.
    const ready = await get(shim.url, '/readyz', { host: '10.0.0.7:9991' });
    expect(ready.status).toBe(200);
    expect(fake.seen.at(-1)?.headers.host).toBe('chat.example.com');
    expect((await get(shim.url, '/healthz', { host: '10.0.0.7:9991' })).status).toBe(200);
    expect((await get(shim.url, '/api/v1/server_settings', { host: 'chat.example.com' })).status).toBe(200);
    expect((await get(shim.url, '/api/v1/server_settings', { host: 'team.example.org' })).status).toBe(200);
  });
});

describe("/readyz in the shim's own words", () => {
  it('with server_settings refused: 503 naming the call and the status the upstream gave', async () => {
    const fake = await startFake({ era: '5.0' });
    const headers = { 'content-type': 'text/html', 'retry-after': '30' };
    fake.override = failing('GET', '/api/v1/server_settings', { status: 503, headers, body: '<h1>Down for maintenance</h1>' });
    const shim = await startShim(fake.url);
    try {
      const a = await get(shim.url, '/readyz', { host: 'chat.example.com' });
      expect(a.status).toBe(503);
      expect(JSON.parse(a.body)).toEqual({
        result: 'error',
        msg: 'not ready: the Zulip server does not answer GET /api/v1/server_settings (server_settings answered HTTP 503)',
        code: 'NOT_READY',
      });
    } finally {
      await shim.close();
      await fake.stop();
    }
  });

  it("with Redis down: 503 naming the store, not the Redis client's wording", async () => {
    const fake = await startFake({ era: '5.0' });
    const shim = await startShim(fake.url, { store: { redisUrl: 'redis://127.0.0.1:1' } });
    try {
      const a = await get(shim.url, '/readyz', { host: 'chat.example.com' });
      expect(a.status).toBe(503);
      expect(JSON.parse(a.body)).toEqual({ result: 'error', msg: 'not ready: the Redis store is not reachable', code: 'NOT_READY' });
    } finally {
      await shim.close();
      await fake.stop();
    }
  });
});

describe('X15: every request is answered', () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  let port: number;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url);
    port = Number(new URL(shim.url).port);
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });

  it('an h2c upgrade offer is answered as plain HTTP/1.1, the offer not passed on', async () => {
    const text = await rawExchange(
      port,
      `GET /api/v1/users/me HTTP/1.1\r\nHost: chat.example.com\r\nAuthorization: ${fake.auth(11)}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n`,
    );
    expect(text).toMatch(/^HTTP\/1\.1 200/);
    expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))).toMatchObject({ result: 'success', user_id: 11 });
    const passed = await rawExchange(
      port,
      `GET /static/x.js HTTP/1.1\r\nHost: chat.example.com\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n`,
    );
    expect(passed).toMatch(/^HTTP\/1\.1 404/);
    const seen = fake.seen.find((r) => r.url === '/static/x.js')!;
    expect(seen.headers.upgrade).toBeUndefined();
    expect(seen.headers['http2-settings']).toBeUndefined();
  });

  it('an absolute-form target reaches the upstream in origin form, with its authority as Host', async () => {
    const text = await rawExchange(
      port,
      `GET http://chat.example.com/static/y.js HTTP/1.1\r\nHost: realm.test\r\nConnection: close\r\n\r\n`,
    );
    expect(text).toMatch(/^HTTP\/1\.1 404/);
    const seen = fake.seen.find((r) => r.url === '/static/y.js')!;
    expect(seen.headers.host).toBe('chat.example.com');
  });
});

/** A raw request's answer, as text, once the shim closed the connection. */
async function rawExchange(port: number, request: string): Promise<string> {
  const a = await sendRaw(`http://127.0.0.1:${port}`, Buffer.from(request, 'latin1'), 5_000, { untilClosed: true });
  return a.bytes.toString('latin1');
}
