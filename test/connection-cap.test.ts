import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  autoConnectionCap,
  CLOSABLE_AFTER_IDLE_MS,
  descriptorLimit,
  FIRST_REQUEST_MS,
  passThroughCap,
} from '../src/http/connection-cap.js';
import { serveCli } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { bodyOf, crowd, metricsText, rawClient, type Crowd, type RawClient } from './support/raw-clients.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * X11: no client holds what others need. Past the cap, what the shim only passes on (long
 * polls, uploads) is refused first, while what it answers itself is answered; at the cap, idle
 * connections make room for new ones.
 */

const HOST = 'chat.example.com';
let fake: FakeZulip;
let shim: RunningShim | undefined;
const clients: RawClient[] = [];
const crowds: Crowd[] = [];

afterEach(async () => {
  for (const c of crowds.splice(0)) c.stop();
  for (const c of clients.splice(0)) c.socket.destroy();
  await shim?.close();
  shim = undefined;
});

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Requests as a client writes them; all but the long poll close their connection after the answer. */
const longPoll = (user: number) =>
  `GET /api/v1/events?queue_id=q&last_event_id=-1&delay_ms=60000 HTTP/1.1\r\nHost: ${HOST}\r\nAuthorization: ${fake.auth(user)}\r\n\r\n`;
const get = (path: string, user: number) =>
  `GET ${path} HTTP/1.1\r\nHost: ${HOST}\r\nAuthorization: ${fake.auth(user)}\r\nConnection: close\r\n\r\n`;
const post = (path: string, user: number, body: string) =>
  `POST ${path} HTTP/1.1\r\nHost: ${HOST}\r\nAuthorization: ${fake.auth(user)}\r\n` +
  `Content-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`;
const presence = (user: number) => post('/api/v1/users/me/presence', user, 'status=active&last_update_id=-1');

/** A client of `url` sending `request`, closed after the test. */
function open(url: string, request?: string): RawClient {
  const c = rawClient(url, request);
  clients.push(c);
  return c;
}

/** A value of a shim's metrics: one in this process read directly, one at a URL by its /metrics. */
async function metric(from: string | RunningShim, name: string): Promise<number> {
  const text = typeof from === 'string' ? await metricsText(from) : await from.shim.context.metrics.registry.metrics();
  return Number(new RegExp(`^zulip_compat_shim_${name} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
}

/** Client connections the shim in this process has open. */
const connections = (s: RunningShim) => new Promise<number>((resolve) => s.shim.server.getConnections((_e, n) => resolve(n)));

/** Waits until `f` holds (checked every 50 ms), or fails after `ms`. */
async function eventually(what: string, f: () => Promise<boolean>, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!(await f())) {
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await pause(50);
  }
}

/** Each request on a connection of its own: the statuses, in order. */
async function statuses(url: string, requests: string[]): Promise<number[]> {
  return Promise.all(requests.map((r) => open(url, r).status));
}

/** What the shim answers itself: presence, own profile, register, server_settings, the user list. */
const answeredByTheShim = (user: number) => [
  presence(user),
  get('/api/v1/users/me', user),
  post('/api/v1/register', user, 'slim_presence=true'),
  get('/api/v1/server_settings', user),
  get('/api/v1/users', user),
];

describe('the connection cap (X11)', () => {
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
  });
  afterAll(async () => {
    await fake.stop();
  });

  it('past the cap on passed-through requests, long polls get a 503 with Retry-After; what the shim answers itself is answered', async () => {
    shim = await startShim(fake.url, { server: { maxConnections: 8 } });
    const url = shim.url;
    const before = fake.stats.requests.get('GET /api/v1/events') ?? 0;
    // Half of 8 may be passed through: 4 long polls are held, the next 2 refused at once.
    const polls = Array.from({ length: 6 }, () => open(url, longPoll(11)));
    const refused = await Promise.all(polls.slice(4).map(async (c) => [await c.status, await c.closed] as const));
    for (const [status, text] of refused) {
      expect(status).toBe(503);
      expect(text).toMatch(/retry-after: 5/i);
      expect(text).toMatch(/connection: close/i);
      expect(bodyOf(text)).toMatchObject({ result: 'error', code: 'UPSTREAM_UNAVAILABLE' });
    }
    expect(await statuses(url, answeredByTheShim(12))).toEqual([200, 200, 200, 200, 200]);
    expect(await statuses(url, [get('/healthz', 12), longPoll(12)])).toEqual([200, 503]);
    // The held ones are held still, upstream too; the refused ones never reached it.
    for (const c of polls.slice(0, 4)) expect(c.received()).toBe('');
    expect((fake.stats.requests.get('GET /api/v1/events') ?? 0) - before).toBe(4);
    expect(await metric(shim, 'passed_through_requests')).toBe(4);
    expect(await metric(shim, 'passed_through_requests_max')).toBe(4);
    expect(await metric(shim, 'passed_through_refused_total')).toBe(3);
  });

  it('at the cap, the connection idle longest is closed for a new one, which is served', async () => {
    shim = await startShim(fake.url, { server: { maxConnections: 4 } });
    const idle: RawClient[] = [];
    for (let i = 0; i < 4; i++) {
      idle.push(open(shim.url));
      await eventually('the shim counting it', async () => (await connections(shim!)) === i + 1, 2_000);
    }
    await pause(CLOSABLE_AFTER_IDLE_MS);
    // Connection 5: the first idle one goes, and the new one's presence poll is answered.
    expect(await open(shim.url, presence(11)).status).toBe(200);
    expect(idle[0]!.socket.destroyed || (await Promise.race([idle[0]!.closed.then(() => true), pause(1_000).then(() => false)]))).toBe(
      true,
    );
    for (const c of idle.slice(1)) expect(c.socket.destroyed).toBe(false);
    expect(await metric(shim, 'client_connections_closed_idle_total')).toBeGreaterThanOrEqual(1);
  });

  it('past the cap with every connection busy: one answer each from the reserve, a pass-through refused, then closed', async () => {
    // Both connections busy: a held long poll, and a presence poll whose body is still coming.
    shim = await startShim(fake.url, { server: { maxConnections: 2, bodyReadTimeoutMs: 60_000 } });
    open(shim.url, longPoll(11));
    open(shim.url, post('/api/v1/users/me/presence', 11, 'status=active').replace(/Content-Length: \d+/, 'Content-Length: 100'));
    await eventually('both connections in use', async () => (await connections(shim!)) === 2, 2_000);
    await pause(100);
    const me = open(shim.url, get('/api/v1/users/me', 12).replace('Connection: close\r\n', ''));
    expect(await me.status).toBe(200);
    expect(await me.closed).toMatch(/connection: close/i);
    const poll = open(shim.url, longPoll(12));
    expect(await poll.status).toBe(503);
    expect(bodyOf(await poll.closed)).toMatchObject({ result: 'error', code: 'UPSTREAM_UNAVAILABLE' });
    expect(await statuses(shim.url, [get('/healthz', 12)])).toEqual([200]);
    expect(await metric(shim, 'client_connections_refused_total')).toBeGreaterThanOrEqual(3);
  });

  it(`a connection accepted near the cap that sends no request within ${FIRST_REQUEST_MS} ms is closed; one accepted before is not`, async () => {
    shim = await startShim(fake.url, { server: { maxConnections: 4 } });
    const early = open(shim.url);
    await eventually('the first counted', async () => (await connections(shim!)) === 1, 2_000);
    open(shim.url);
    const near = open(shim.url); // the third of four: near the cap
    const started = Date.now();
    await near.closed;
    expect(Date.now() - started).toBeGreaterThanOrEqual(FIRST_REQUEST_MS - 100);
    expect(early.socket.destroyed).toBe(false);
  }, 15_000);

  it('auto: two thirds of the descriptors after a reserve and the three upstream pools; half of it for what is passed through', () => {
    expect(autoConnectionCap(20_000, 256)).toBe(Math.floor(((20_000 - 512 - 768) * 2) / 3));
    expect(autoConnectionCap(2_048, 256)).toBe(512);
    expect(passThroughCap(512)).toBe(256);
    // Every descriptor accounted for: connections, passed-through upstream requests, the pools, the reserve.
    expect(512 + 256 + 3 * 256 + 512).toBeLessThanOrEqual(2_048);
    expect(autoConnectionCap(undefined, 256)).toBe(Number.POSITIVE_INFINITY);
    expect(autoConnectionCap(100, 256)).toBe(2);
    expect(descriptorLimit('/nonexistent')).toBeUndefined();
    if (process.platform === 'linux') expect(descriptorLimit()).toBeGreaterThan(0);
  });
});

describe('a shim process allowed 2,048 descriptors (X11)', () => {
  const DESCRIPTORS = 2_048;
  let child: Awaited<ReturnType<typeof serveCli>>;
  let url: string;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    child = await serveCli(fake.url, { descriptors: DESCRIPTORS });
    url = child.url;
  });
  afterAll(async () => {
    await child.stop();
    await fake.stop();
  });

  it('more long polls than the cap allows: presence, profile and register answered 200, /events 503', async () => {
    const max = await metric(url, 'passed_through_requests_max');
    expect(max).toBe(passThroughCap(autoConnectionCap(DESCRIPTORS, 256)));
    const polls = Array.from({ length: max + 40 }, (_, i) => open(url, longPoll(11 + (i % 3))));
    await eventually(
      'every long poll held or refused',
      async () => (await metric(url, 'passed_through_refused_total')) >= 40 && (await metric(url, 'passed_through_requests')) === max,
      10_000,
    );
    expect(await statuses(url, [presence(12), get('/api/v1/users/me', 12), post('/api/v1/register', 12, 'slim_presence=true')])).toEqual([
      200, 200, 200,
    ]);
    expect(await statuses(url, [longPoll(12)])).toEqual([503]);
    expect(polls.filter((c) => c.received() === '')).toHaveLength(max);
    for (const c of polls) c.socket.destroy();
    await eventually('the long polls gone', async () => (await metric(url, 'passed_through_requests')) === 0, 10_000);
  }, 30_000);

  it('900 idle connections, re-opened when closed, leave new clients’ presence answered', async () => {
    const max = await metric(url, 'client_connections_max');
    expect(max).toBeLessThan(900);
    const idle = crowd(url, 900, { reopenMs: 200 });
    crowds.push(idle);
    await eventually('the cap reached', async () => (await metric(url, 'client_connections')) >= max, 10_000);
    // New clients, five at a time, each on a connection of its own, for longer than the idle
    // ones may stay silent near the cap (after which they are closed, and come back).
    const until = Date.now() + FIRST_REQUEST_MS + 2_000;
    while (Date.now() < until) {
      const started = Date.now();
      expect(await statuses(url, [11, 12, 13, 14, 15].map(presence))).toEqual([200, 200, 200, 200, 200]);
      expect(Date.now() - started).toBeLessThan(2_000);
      await pause(500);
    }
    expect(idle.closes()).toBeGreaterThan(0);
    expect(await metric(url, 'client_connections_closed_idle_total')).toBeGreaterThan(0);
  }, 30_000);
});

describe('the mobile app’s long polls at the cap (X11, M2)', () => {
  beforeAll(async () => {
    fake = await startFake({ era: '7.0' });
  });
  afterAll(async () => {
    await fake.stop();
  });

  it('count against the pass-through’s share like everyone’s, though the translator takes them', async () => {
    shim = await startShim(fake.url, { server: { maxConnections: 8 }, app: { featureLevel: 277 } });
    const appPoll = (user: number) => longPoll(user).replace('\r\n\r\n', '\r\nUser-Agent: ZulipFlutter/30.0 (Android 14)\r\n\r\n');
    const polls = Array.from({ length: 6 }, () => open(shim!.url, appPoll(11)));
    const refused = await Promise.all(polls.slice(4).map((c) => c.status));
    expect(refused).toEqual([503, 503]);
    expect(await statuses(shim.url, [presence(12), get('/api/v1/users/me', 12)])).toEqual([200, 200]);
    for (const c of polls.slice(0, 4)) expect(c.received()).toBe('');
  });
});
