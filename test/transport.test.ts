import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { UpstreamTimeoutError, UpstreamUnavailableError } from '../src/http/errors.js';
import { createTransport } from '../src/upstream/transport.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { jsonOf, send, type Answer } from './support/http-client.js';
import { pairHoldingUpstream } from './support/pair-holding-upstream.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * The one upstream transport (upstream/transport.ts): X3 total deadlines on buffered
 * exchanges, X5 safe retry of idempotent requests whose kept-alive connection broke, and the
 * failures as the shim's own error classes.
 */

const FORM = 'application/x-www-form-urlencoded';
const form = (o: Record<string, string>) => Buffer.from(new URLSearchParams(o).toString());

/** An upstream on loopback with a handler per test. */
async function upstream(handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ server: http.Server; url: string }> {
  const server = http.createServer(handle);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

async function stop(server: http.Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
}

describe('X3: a buffered exchange ends within upstream.timeoutMs, however slowly bytes drip', () => {
  // A whole drip would take 60 s; each call below has 10 s to come back: a test that waited
  // for the drip (silence-only timeouts) fails by its own timeout.
  const DRIP_BYTES = 600;
  const DRIP_EVERY_MS = 100;
  let fake: FakeZulip;
  let shim: RunningShim;
  let drips: Set<NodeJS.Timeout>;

  /** Answers `path` with headers at once, then one body byte every 100 ms. */
  function drip(path: string): void {
    fake.override = (req, res) => {
      if ((req.url ?? '').split('?')[0] !== path) return false;
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(DRIP_BYTES) });
      const t = setInterval(() => res.write(' '), DRIP_EVERY_MS);
      drips.add(t);
      res.on('close', () => clearInterval(t));
      return true;
    };
  }

  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    // The silence timeout never fires (a byte every 100 ms); only a total deadline can.
    shim = await startShim(fake.url, { upstream: { timeoutMs: 500 } });
  });
  afterEach(() => {
    fake.override = undefined;
    for (const t of drips ?? []) clearInterval(t);
  });
  afterAll(async () => {
    await shim.close();
    await fake.stop();
  });

  const expect504 = (a: Answer) => {
    expect(a.status, a.body.toString()).toBe(504);
    expect(jsonOf(a)).toMatchObject({ result: 'error', code: 'UPSTREAM_TIMEOUT' });
  };

  it('presence: the poll and every other caller of the realm waiting on the same fetch get 504', async () => {
    drips = new Set();
    drip('/api/v1/users/me/presence');
    const poll = (user: number) =>
      send(
        shim.url,
        {
          method: 'POST',
          path: '/api/v1/users/me/presence',
          headers: { authorization: fake.auth(user), 'content-type': FORM },
          body: form({ status: 'active', last_update_id: '-1' }),
        },
        { timeoutMs: 10_000 },
      );
    const answers = await Promise.all([poll(10), poll(11), poll(12)]);
    for (const a of answers) expect504(a);
  });

  it('own profile: 504', async () => {
    drips = new Set();
    drip('/api/v1/users/me');
    expect504(
      await send(shim.url, { method: 'GET', path: '/api/v1/users/me', headers: { authorization: fake.auth(10) } }, { timeoutMs: 10_000 }),
    );
  });

  it.each([
    ['register with presence', '["presence"]'],
    ['register with realm_user only (its users backfilled, V1)', '["realm_user"]'],
  ])('%s: 504', async (_name, eventTypes) => {
    drips = new Set();
    drip('/api/v1/register');
    const a = await send(
      shim.url,
      {
        method: 'POST',
        path: '/api/v1/register',
        headers: { authorization: fake.auth(10), 'content-type': FORM },
        body: form({ event_types: eventTypes }),
      },
      { timeoutMs: 10_000 },
    );
    expect504(a);
  });

  it('the user list (GET /users, backfilled): 504', async () => {
    drips = new Set();
    drip('/api/v1/users');
    expect504(
      await send(shim.url, { method: 'GET', path: '/api/v1/users', headers: { authorization: fake.auth(10) } }, { timeoutMs: 10_000 }),
    );
  });

  it('the transport rejects a dripping fetch at its deadline with UpstreamTimeoutError', async () => {
    drips = new Set();
    drip('/api/v1/server_settings');
    const t = createTransport({ target: fake.url, timeoutMs: 5_000, maxSockets: 2, insecureTls: false });
    try {
      const r = await t.dispatcher.request({ method: 'GET', path: '/api/v1/server_settings', deadlineMs: 300 } as never);
      await expect(r.body.text()).rejects.toBeInstanceOf(UpstreamTimeoutError);
    } finally {
      await t.close();
    }
  });
});

describe('X5: an idempotent request cut on a reused kept-alive connection is retried once', () => {
  /** Answers the first request on each connection; a later one on the same connection breaks it. */
  let arrivals: Map<string, number>;
  let server: http.Server;
  let url: string;

  beforeAll(async () => {
    const served = new WeakSet<Socket>();
    ({ server, url } = await upstream((req, res) => {
      const key = `${req.method} ${req.url}`;
      arrivals.set(key, (arrivals.get(key) ?? 0) + 1);
      if (served.has(req.socket)) {
        req.socket.destroy(); // the upstream closed this idle connection as the request went out
        return;
      }
      served.add(req.socket);
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"success","msg":""}'));
    }));
  });
  afterAll(() => stop(server));

  async function onReusedConnection(method: string, path: string): Promise<Answer> {
    arrivals = new Map();
    const shim = await startShim(url, { upstream: { maxSockets: 1 } });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const first = await send(shim.url, { method: 'GET', path: '/warm' }, { agent, timeoutMs: 10_000 });
      expect(first.status).toBe(200);
      const body = method === 'POST' ? Buffer.from('a=1') : undefined;
      return await send(
        shim.url,
        { method, path, ...(body ? { body, headers: { 'content-type': FORM } } : {}) },
        { agent, timeoutMs: 10_000 },
      );
    } finally {
      agent.destroy();
      await shim.close();
    }
  }

  it('GET, HEAD and OPTIONS are answered from a fresh connection', async () => {
    for (const method of ['GET', 'HEAD', 'OPTIONS']) {
      const a = await onReusedConnection(method, '/api/v1/messages?anchor=newest');
      expect(a.status, `${method}: ${a.body.toString()}`).toBe(200);
      expect(arrivals.get(`${method} /api/v1/messages?anchor=newest`), method).toBe(2);
    }
  });

  it('a POST is sent once, never again: 502', async () => {
    const a = await onReusedConnection('POST', '/api/v1/messages');
    expect(a.status).toBe(502);
    expect(jsonOf(a)).toMatchObject({ code: 'UPSTREAM_UNAVAILABLE' });
    expect(arrivals.get('POST /api/v1/messages')).toBe(1);
  });

  it("the shim's own POST (a body it holds whole, which could be sent again) is sent once, never again", async () => {
    arrivals = new Map();
    const t = createTransport({ target: url, timeoutMs: 5_000, maxSockets: 1, insecureTls: false });
    try {
      const warm = await t.dispatcher.request({ method: 'GET', path: '/warm' });
      await warm.body.text();
      // As UpstreamClient sends a status report: a Buffer body, on the kept-alive connection the upstream then breaks.
      const report = t.dispatcher.request({
        method: 'POST',
        path: '/api/v1/users/me/presence',
        headers: { 'content-type': FORM },
        body: Buffer.from('status=active&ping_only=true'),
      });
      await expect(report).rejects.toBeInstanceOf(UpstreamUnavailableError);
      expect(arrivals.get('POST /api/v1/users/me/presence')).toBe(1);
    } finally {
      await t.close();
    }
  });

  it('not at all where the target stands in for the upstream (a recorder, which retries itself)', async () => {
    arrivals = new Map();
    const { server: broken, url: brokenUrl } = await upstream((req) => {
      const key = `${req.method} ${req.url}`;
      arrivals.set(key, (arrivals.get(key) ?? 0) + 1);
      req.socket.destroy();
    });
    const t = createTransport({ target: brokenUrl, timeoutMs: 5_000, maxSockets: 1, insecureTls: false, retry: false });
    try {
      await expect(t.dispatcher.request({ method: 'GET', path: '/x' })).rejects.toBeInstanceOf(UpstreamUnavailableError);
      expect(arrivals.get('GET /x')).toBe(1);
    } finally {
      await t.close();
      await stop(broken);
    }
  });

  it('a GET whose retry fails too is answered 502 once', async () => {
    arrivals = new Map();
    const { server: broken, url: brokenUrl } = await upstream((req) => {
      const key = `${req.method} ${req.url}`;
      arrivals.set(key, (arrivals.get(key) ?? 0) + 1);
      req.socket.destroy();
    });
    const t = createTransport({ target: brokenUrl, timeoutMs: 5_000, maxSockets: 1, insecureTls: false });
    try {
      await expect(t.dispatcher.request({ method: 'GET', path: '/x' })).rejects.toBeInstanceOf(UpstreamUnavailableError);
      expect(arrivals.get('GET /x')).toBe(2);
    } finally {
      await t.close();
      await stop(broken);
    }
  });
});

describe('X5 under an upstream that closes kept-alive connections under requests', () => {
  it('800 GETs through the pass-through: none gets a 502', async () => {
    const served = new WeakSet<Socket>();
    let reused = 0;
    const { server, url } = await upstream((req, res) => {
      // One in ten requests that arrive on a kept-alive connection finds it being closed by
      // the upstream (its idle timeout firing as the request went out): no answer at all.
      if (served.has(req.socket) && ++reused % 10 === 0) {
        req.socket.destroy();
        return;
      }
      served.add(req.socket);
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"success","msg":""}');
    });
    const shim = await startShim(url);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 20 });
    try {
      const statuses = new Map<number, number>();
      let next = 0;
      const worker = async () => {
        while (next < 800) {
          next++;
          const a = await send(shim.url, { method: 'GET', path: '/api/v1/messages?anchor=newest' }, { agent, timeoutMs: 10_000 });
          statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
        }
      };
      await Promise.all(Array.from({ length: 20 }, worker));
      expect(Object.fromEntries(statuses)).toEqual({ 200: 800 });
    } finally {
      agent.destroy();
      await shim.close();
      await stop(server);
    }
  }, 60_000);
});

describe('T1: the pool a request takes', () => {
  /** Two GETs at once of a path the table does not call a long poll, through one connection's pool; how many the upstream held at once. */
  async function heldPair(longPoll: boolean | undefined): Promise<number> {
    const up = await pairHoldingUpstream(longPoll ? 5_000 : 300);
    const transport = createTransport({ target: up.url, timeoutMs: 20_000, maxSockets: 1, insecureTls: false });
    try {
      await Promise.all(
        [1, 2].map(() =>
          transport.dispatcher
            .request({ method: 'GET', path: '/api/v1/held', passThrough: true, longPoll } as never)
            .then((r) => r.body.text()),
        ),
      );
      return up.mostAtOnce();
    } finally {
      await transport.close();
      await up.close();
    }
  }

  it('a request the router called a long poll takes the uncapped long-poll pool, whatever its path says', async () => {
    expect(await heldPair(true)).toBe(2);
  });

  it('without the router’s word the path decides: here the one-connection pass-through pool', async () => {
    expect(await heldPair(undefined)).toBe(1);
  });
});
