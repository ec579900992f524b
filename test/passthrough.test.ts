import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { rawUpgrade } from './support/http-client.js';
import { startShim, type RunningShim } from './support/shim.js';
import { loadConfig } from '../src/config/index.js';
import { TrustedProxies } from '../src/http/forwarded.js';

/**
 * The pass-through (T1, E1, E2): everything the shim does not intercept goes to the upstream and
 * back unchanged, streamed, without leaking sockets; an unreachable upstream is a Zulip-shaped
 * 502; X-Forwarded-* are trusted only from --trust-proxy peers (X4).
 */

describe('pass-through (T1, E1, E2)', () => {
  let fake: FakeZulip;
  let shim: RunningShim;

  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url, { upstream: { timeoutMs: 1500 } });
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });

  it('keeps method, path, query, headers, body and status, keeps Host and adds X-Forwarded-*', async () => {
    const body = Buffer.from('a=1&b=%E2%9C%93&b=2');
    const res = await request(shim.url)
      .patch('/test/echo?status=207&x=1&x=2')
      .set('Host', 'chat.example.com')
      .set('X-Custom', 'yes')
      .set('Authorization', 'Basic Zm9vOmJhcg==')
      .set('Content-Type', 'application/x-www-form-urlencoded')
      .send(body.toString());
    expect(res.status).toBe(207);
    expect(res.headers['x-upstream-header']).toBe('kept');
    expect(res.headers['set-cookie']).toEqual(['a=1; Path=/']);
    const echo = res.body as { method: string; url: string; headers: Record<string, string>; body: string };
    expect(echo.method).toBe('PATCH');
    expect(echo.url).toBe('/test/echo?status=207&x=1&x=2');
    expect(Buffer.from(echo.body, 'base64').equals(body)).toBe(true);
    expect(echo.headers.host).toBe('chat.example.com');
    expect(echo.headers['x-custom']).toBe('yes');
    expect(echo.headers.authorization).toBe('Basic Zm9vOmJhcg==');
    expect(echo.headers['x-forwarded-for']).toMatch(/127\.0\.0\.1/);
    expect(echo.headers['x-forwarded-proto']).toBe('http');
    expect(echo.headers['x-forwarded-host']).toBe('chat.example.com');
    expect(echo.headers['x-request-id']).toBeTruthy();
  });

  it('puts the request id on every answer: the one sent upstream, a trusted proxy’s own when sane, never a client’s', async () => {
    const made = await request(shim.url).get('/test/echo').set('Host', 'chat.example.com');
    const sent = (made.body as { headers: Record<string, string> }).headers['x-request-id'];
    expect(sent).toMatch(/^[0-9a-f-]{36}$/);
    expect(made.headers['x-request-id']).toBe(sent);
    // A client's own id is not believed (it could collide with or forge another's in the logs).
    const own = await request(shim.url).get('/test/echo').set('Host', 'chat.example.com').set('X-Request-Id', 'trace-41');
    expect((own.body as { headers: Record<string, string> }).headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(own.headers['x-request-id']).toBe((own.body as { headers: Record<string, string> }).headers['x-request-id']);
    const trusting = await startShim(fake.url, { server: { trustProxy: ['127.0.0.1'] } });
    try {
      const given = await request(trusting.url).get('/test/echo').set('Host', 'chat.example.com').set('X-Request-Id', 'trace-42');
      expect((given.body as { headers: Record<string, string> }).headers['x-request-id']).toBe('trace-42');
      expect(given.headers['x-request-id']).toBe('trace-42');
      const insane = await request(trusting.url).get('/test/echo').set('Host', 'chat.example.com').set('X-Request-Id', 'a b\u00e9');
      expect(insane.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    } finally {
      await trusting.close();
    }
    // Answers the shim writes itself: its own paths, a refused Host, an intercepted endpoint.
    for (const r of [
      await request(shim.url).get('/healthz'),
      await request(shim.url).get('/test/echo').set('Host', ''),
      await request(shim.url).get('/api/v1/users/me').set('Host', 'chat.example.com'),
    ])
      expect(r.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("replaces a client's X-Forwarded-Host/Proto by its own view and appends to X-Forwarded-For (X4)", async () => {
    const res = await request(shim.url)
      .get('/test/echo')
      .set('Host', 'shim.internal')
      .set('X-Forwarded-For', '203.0.113.7')
      .set('X-Forwarded-Proto', 'https')
      .set('X-Forwarded-Host', 'other-realm.example.com');
    const h = (res.body as { headers: Record<string, string> }).headers;
    expect(h['x-forwarded-proto']).toBe('http');
    expect(h['x-forwarded-host']).toBe('shim.internal');
    expect(h['x-forwarded-for']).toMatch(/^203\.0\.113\.7, .*127\.0\.0\.1$/);
  });

  it('replaces them on intercepted calls too (X4)', async () => {
    const res = await request(shim.url)
      .get('/api/v1/users/me')
      .set('Host', 'shim.internal')
      .set('Authorization', fake.auth(10))
      .set('X-Forwarded-Host', 'other-realm.example.com');
    expect(res.status).toBe(200);
    const seen = fake.seen.filter((r) => r.url === '/api/v1/users/me').at(-1);
    expect(seen?.headers['x-forwarded-host']).toBe('shim.internal');
  });

  it('keeps the Proto and Host a trusted proxy in front said (--trust-proxy, X4)', async () => {
    const trusting = await startShim(fake.url, { server: { trustProxy: ['10.0.0.0/8', '127.0.0.1/32'] } });
    try {
      const res = await request(trusting.url)
        .get('/test/echo')
        .set('Host', 'shim.internal')
        .set('X-Forwarded-For', '203.0.113.7')
        .set('X-Forwarded-Proto', 'https')
        .set('X-Forwarded-Host', 'chat.example.com');
      const h = (res.body as { headers: Record<string, string> }).headers;
      expect(h['x-forwarded-proto']).toBe('https');
      expect(h['x-forwarded-host']).toBe('chat.example.com');
      expect(h['x-forwarded-for']).toMatch(/^203\.0\.113\.7, .*127\.0\.0\.1$/);
    } finally {
      await trusting.close();
    }
  });

  it('passes an upstream error through unchanged (E1)', async () => {
    const res = await request(shim.url).get('/api/v1/users').set('Authorization', 'Basic bm9wZTpub3Bl');
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ result: 'error', msg: 'Invalid API key' });
    expect(res.headers['www-authenticate']).toBe('Basic realm="zulip"');
  });

  it('streams a chunked answer chunk by chunk', async () => {
    const { port } = new URL(shim.url);
    const arrivals: number[] = [];
    const start = Date.now();
    await new Promise<void>((resolve, reject) => {
      http.get({ host: '127.0.0.1', port, path: '/test/chunked?n=3&gap_ms=300' }, (res) => {
        res.on('data', () => arrivals.push(Date.now() - start));
        res.on('end', resolve);
        res.on('error', reject);
      });
    });
    expect(arrivals.length).toBeGreaterThanOrEqual(3);
    // The first chunk arrives long before the last one was written.
    expect(arrivals[0]!).toBeLessThan(250);
    expect(arrivals[arrivals.length - 1]! - arrivals[0]!).toBeGreaterThanOrEqual(500);
  });

  it('does not cut a long poll shorter than the upstream timeout', async () => {
    const res = await request(shim.url).get('/api/v1/events?delay_ms=1000').set('Authorization', fake.auth(10));
    expect(res.status).toBe(200);
    expect(res.body.events[0].type).toBe('heartbeat');
  });

  it('answers a silent upstream with 504 UPSTREAM_TIMEOUT', async () => {
    const res = await request(shim.url).get('/test/slow?ms=5000');
    expect(res.status).toBe(504);
    expect(res.body).toMatchObject({ result: 'error', code: 'UPSTREAM_TIMEOUT' });
  });

  it('leaves no upstream socket open after 1,000 clients abort mid-response', async () => {
    const { port } = new URL(shim.url);
    const before = await fake.connections();
    const aborts = Array.from(
      { length: 1000 },
      () =>
        new Promise<void>((resolve) => {
          const req = http.get({ host: '127.0.0.1', port, path: '/test/big?kb=256', agent: false }, (res) => {
            res.once('data', () => {
              req.destroy();
              resolve();
            });
          });
          req.on('error', () => resolve());
        }),
    );
    await Promise.all(aborts);
    // Destroyed upstream sockets close asynchronously; wait for them to go.
    let open = await fake.connections();
    for (let i = 0; i < 50 && open > before + 64; i++) {
      await new Promise((r) => setTimeout(r, 100));
      open = await fake.connections();
    }
    // Only the kept-alive idle pool (maxFreeSockets) may stay.
    expect(open).toBeLessThanOrEqual(before + 64);
  }, 60_000);

  /** A raw upgrade, to a fake that does not speak WebSocket: it still reaches it and comes back. */
  const upgradeEcho = (headers = '') => rawUpgrade(Number(new URL(shim.url).port), { path: '/test/echo', headers });

  it('passes WebSocket-style upgrades through', async () => {
    const answer = await upgradeEcho();
    expect(answer).toMatch(/^HTTP\/1\.1 200/);
    // X4 on upgrades too: the echoed request carries the shim's X-Forwarded-*.
    expect(answer).toContain('"x-forwarded-host":"x"');
    expect(answer).toContain('"x-forwarded-proto":"http"');
    expect(answer).toMatch(/"x-forwarded-for":"[^"]*127\.0\.0\.1"/);
  });

  it("replaces a client's X-Forwarded-Host/Proto on an upgrade too, and appends to X-Forwarded-For (X4)", async () => {
    const answer = await upgradeEcho(
      'X-Forwarded-Host: other-realm.example.com\r\nX-Forwarded-Proto: https\r\nX-Forwarded-For: 203.0.113.7\r\n',
    );
    expect(answer).toMatch(/^HTTP\/1\.1 200/);
    expect(answer).toContain('"x-forwarded-host":"x"');
    expect(answer).toContain('"x-forwarded-proto":"http"');
    expect(answer).toMatch(/"x-forwarded-for":"203\.0\.113\.7, [^"]*127\.0\.0\.1"/);
  });
});

describe('upstream unreachable (E2)', () => {
  it('answers 502 UPSTREAM_UNAVAILABLE', async () => {
    const shim = await startShim('http://127.0.0.1:1');
    try {
      const res = await request(shim.url).get('/api/v1/messages');
      expect(res.status).toBe(502);
      expect(res.body).toMatchObject({ result: 'error', code: 'UPSTREAM_UNAVAILABLE' });
      // The shim's own answer in place of the upstream's carries the request id all the same.
      expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    } finally {
      await shim.close();
    }
  });
});

describe('--trust-proxy (X4)', () => {
  it('matches IPv4, IPv6 and IPv4-mapped peers against CIDR ranges', () => {
    const t = new TrustedProxies(['10.0.0.0/8', 'fd00::/8', '192.0.2.1']);
    expect(t.trusts('10.1.2.3')).toBe(true);
    expect(t.trusts('::ffff:10.1.2.3')).toBe(true);
    expect(t.trusts('fd12::1')).toBe(true);
    expect(t.trusts('192.0.2.1')).toBe(true);
    expect(t.trusts('192.0.2.2')).toBe(false);
    expect(t.trusts('11.0.0.1')).toBe(false);
    expect(t.trusts(undefined)).toBe(false);
    expect(new TrustedProxies([]).trusts('127.0.0.1')).toBe(false);
  });

  it('is read from the flag, the environment and the config file, and checked', () => {
    const flag = loadConfig(['--upstream', 'http://127.0.0.1:9', '--trust-proxy', '10.0.0.0/8, ::1'], {}).config;
    expect(flag.server.trustProxy).toEqual(['10.0.0.0/8', '::1']);
    const env = loadConfig(['--upstream', 'http://127.0.0.1:9'], { TRUST_PROXY: '127.0.0.1/32' }).config;
    expect(env.server.trustProxy).toEqual(['127.0.0.1/32']);
    expect(loadConfig(['--upstream', 'http://127.0.0.1:9'], {}).config.server.trustProxy).toEqual([]);
    expect(() => loadConfig(['--upstream', 'http://127.0.0.1:9', '--trust-proxy', '10.0.0.0/33'], {})).toThrow(/server\.trustProxy/);
    expect(() => loadConfig(['--upstream', 'http://127.0.0.1:9', '--trust-proxy', 'proxy.example.com'], {})).toThrow(/CIDR/);
  });
});

describe('defaults', () => {
  it('waits longer than a Zulip long poll (>= 90 s) by default', () => {
    const { config } = loadConfig(['--upstream', 'http://127.0.0.1:9'], {});
    expect(config.upstream.timeoutMs).toBeGreaterThanOrEqual(90_000);
  });
});
