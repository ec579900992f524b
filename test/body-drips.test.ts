import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { MIN_BYTES_PER_WINDOW } from '../src/http/body-deadline.js';
import { clientAddressOf, TrustedProxies } from '../src/http/forwarded.js';
import { serveCli } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { bodyOf, crowd, metricsText, rawClient, type Crowd, type RawClient } from './support/raw-clients.js';
import { startShim, testConfig, type RunningShim } from './support/shim.js';

/**
 * X11: a body must keep arriving. A drip (a few bytes now and then, however regular) is cut
 * within a window of `server.bodyReadTimeoutMs`; uploads are bounded per client address, so
 * that clients dripping their bodies and coming back at once cannot hold the pass-through's
 * upstream connections; a real upload over a slow link still finishes.
 */

const HOST = 'chat.example.com';
let fake: FakeZulip;
let shim: RunningShim | undefined;
const clients: RawClient[] = [];
const crowds: Crowd[] = [];

beforeAll(async () => {
  fake = await startFake({ era: '2.1' });
});
afterAll(async () => {
  await fake.stop();
});
afterEach(async () => {
  for (const c of crowds.splice(0)) c.stop();
  for (const c of clients.splice(0)) c.socket.destroy();
  await shim?.close();
  shim = undefined;
});

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The head of an upload of `length` bytes passed through, and its first byte. */
const upload = (length: number, extra = '') =>
  `POST /api/v1/messages HTTP/1.1\r\nHost: ${HOST}\r\nAuthorization: ${fake.auth(11)}\r\n${extra}` +
  `Content-Type: application/x-www-form-urlencoded\r\nContent-Length: ${length}\r\n\r\nt`;
const probe = `GET /test/echo HTTP/1.1\r\nHost: ${HOST}\r\nConnection: close\r\n\r\n`;

function open(url: string, request?: string, localAddress?: string): RawClient {
  const c = rawClient(url, request, localAddress ? { localAddress } : {});
  clients.push(c);
  return c;
}

/** A client that sends `request`, then `piece` every `everyMs`, until it is answered or closed. */
function drip(url: string, request: string, piece: string, everyMs: number): RawClient {
  const c = open(url, request);
  const timer = setInterval(() => c.socket.write(piece), everyMs);
  void c.closed.then(() => clearInterval(timer));
  return c;
}

/** A value of a metrics text (`name` with its labels, as written). */
function valueIn(text: string, name: string): number {
  const escaped = name.replace(/[{}"]/g, (c) => `\\${c}`);
  return Number(new RegExp(`^zulip_compat_shim_${escaped} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
}
const metric = async (s: RunningShim, name: string) => valueIn(await s.shim.context.metrics.registry.metrics(), name);
const metricAt = async (url: string, name: string) => valueIn(await metricsText(url), name);

/** Pass-through probes on new connections, `n` of them `gapMs` apart: each one's status and milliseconds. */
async function probes(url: string, n: number, gapMs: number): Promise<Array<{ status: number; ms: number }>> {
  const out: Array<Promise<{ status: number; ms: number }>> = [];
  for (let i = 0; i < n; i++) {
    const started = Date.now();
    out.push(open(url, probe).status.then((status) => ({ status, ms: Date.now() - started })));
    await pause(gapMs);
  }
  return Promise.all(out);
}

describe('a body must keep arriving (X11)', () => {
  it('a drip is cut at the end of its first window with a 408, logged at warn with the bytes received', async () => {
    shim = await startShim(fake.url, { server: { bodyReadTimeoutMs: 500 } });
    const started = Date.now();
    // Ten bytes a second: a deadline per read (nginx's) would never cut it.
    const c = drip(shim.url, upload(10_000), 'x', 100);
    expect(await c.status).toBe(408);
    expect(Date.now() - started).toBeLessThan(1_500);
    const text = await c.closed;
    expect(text).toMatch(/connection: close/i);
    expect(bodyOf(text)).toEqual({
      result: 'error',
      msg: `Request body stalled: less than ${MIN_BYTES_PER_WINDOW} bytes of it arrived in 500 ms`,
      code: 'BAD_REQUEST',
    });
    const line = shim.logs
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => l.msg === 'request body too slow: answered 408');
    expect(line).toMatchObject({ level: 40, reason: 'stalled', declared: 10_000, path: '/api/v1/messages' });
    expect(line?.bytes).toBeGreaterThanOrEqual(2);
    expect(line?.bytes).toBeLessThan(20);
    expect(await metric(shim, 'request_body_timeouts_total{reason="stalled"}')).toBe(1);
  });

  it('a body that keeps arriving but not all within the total deadline gets the 408 of the total, with its bytes logged', async () => {
    shim = await startShim(fake.url, { server: { bodyReadTimeoutMs: 500, bodyTimeoutMs: 1_000 } });
    const c = drip(shim.url, upload(1_000_000), 'x'.repeat(4_096), 100);
    expect(await c.status).toBe(408);
    expect(bodyOf(await c.closed)).toMatchObject({ msg: 'Request body not received within 1000 ms' });
    const line = shim.logs
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => l.msg === 'request body too slow: answered 408');
    expect(line).toMatchObject({ level: 40, reason: 'total' });
    expect(line?.bytes).toBeGreaterThan(5 * 4_096);
  });

  it('an upload at 100 KB/s finishes though it takes many windows (scaled: 250 KB in 2.5 s, windows of 500 ms)', async () => {
    shim = await startShim(fake.url, { server: { bodyReadTimeoutMs: 500, bodyTimeoutMs: 5_000 } });
    const length = 250_000;
    const c = open(
      shim.url,
      `POST /test/echo HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${length}\r\nConnection: close\r\n\r\n`,
    );
    for (let sent = 0; sent < length; sent += 10_000) {
      c.socket.write(Buffer.alloc(10_000, 0x61));
      await pause(100);
    }
    expect(await c.status).toBe(200);
    const echoed = bodyOf(await c.closed) as { body: string };
    expect(Buffer.from(echoed.body, 'base64').length).toBe(length);
  });

  it('the defaults fit a 25 MB upload at 100 KB/s: the total deadline with a tenth to spare, and a window’s bytes many times over', () => {
    const { server } = testConfig('http://127.0.0.1:1');
    const seconds = 25e6 / 100e3;
    expect(server.bodyTimeoutMs).toBeGreaterThanOrEqual(seconds * 1000 * 1.1);
    expect((100e3 * server.bodyReadTimeoutMs) / 1000).toBeGreaterThanOrEqual(100 * MIN_BYTES_PER_WINDOW);
  });

  it('an upload waiting for an upstream connection is not cut as a stall: the shim, not the client, stopped reading', async () => {
    shim = await startShim(fake.url, { upstream: { maxSockets: 1 }, server: { bodyReadTimeoutMs: 300 } });
    // The pass-through's one upstream connection is busy for 1.5 s.
    const busy = open(shim.url, `GET /test/slow?ms=1500 HTTP/1.1\r\nHost: ${HOST}\r\nConnection: close\r\n\r\n`);
    await pause(100);
    const length = 200_000;
    const c = open(
      shim.url,
      `POST /test/echo HTTP/1.1\r\nHost: ${HOST}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${length}\r\nConnection: close\r\n\r\n`,
    );
    c.socket.write(Buffer.alloc(length, 0x61));
    expect(await busy.status).toBe(200);
    expect(await c.status).toBe(200);
  });
});

describe('drips that come back (X11)', () => {
  // The shim in a process of its own (as deployed, with its default configuration but what is
  // named): this process runs the drips and the upstream.
  let child: Awaited<ReturnType<typeof serveCli>> | undefined;
  afterEach(async () => {
    await child?.stop();
    child = undefined;
  });

  it('300 re-opening drips from one address leave pass-through answered within 2 s', async () => {
    child = await serveCli(fake.url);
    const drips = crowd(child.url, 300, { reopenMs: 1_000, request: () => upload(10_000), drip: 'x', dripMs: 1_000 });
    crowds.push(drips);
    await pause(1_000);
    const answers = await probes(child.url, 8, 300);
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(a.ms).toBeLessThan(2_000);
    }
    // One address holds at most server.uploadsPerAddress of the uploads' upstream connections.
    expect(await metricAt(child.url, 'uploads_refused_total')).toBeGreaterThan(0);
    expect(drips.statuses()).toContain(503);
  });

  it('drips from more addresses than uploads have upstream connections are cut within a window; pass-through is answered within 2 s', async () => {
    child = await serveCli(fake.url, { config: { upstream: { maxSockets: 8 }, server: { bodyReadTimeoutMs: 1_000 } } });
    const drips = crowd(child.url, 24, {
      reopenMs: 50,
      request: () => upload(10_000),
      drip: 'x',
      dripMs: 200,
      localAddress: (i) => `127.0.0.${2 + i}`,
    });
    crowds.push(drips);
    await pause(1_500);
    const answers = await probes(child.url, 8, 300);
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(a.ms).toBeLessThan(2_000);
    }
    expect(drips.statuses()).toContain(408);
    expect(await metricAt(child.url, 'uploads_refused_total')).toBe(0);
    expect(await metricAt(child.url, 'request_body_timeouts_total{reason="stalled"}')).toBeGreaterThan(0);
  });
});

describe('uploads per client address (X11)', () => {
  it('behind a trusted proxy, each forwarded client counts apart; otherwise X-Forwarded-For changes nothing', async () => {
    shim = await startShim(fake.url, { server: { uploadsPerAddress: 2, trustProxy: ['127.0.0.1'] } });
    const from = (address: string) => open(shim!.url, upload(10_000, `X-Forwarded-For: ${address}\r\n`));
    const held = [from('10.0.0.1'), from('10.0.0.1')];
    await pause(200);
    const third = from('10.0.0.1');
    expect(await third.status).toBe(503);
    expect(bodyOf(await third.closed)).toMatchObject({
      code: 'UPSTREAM_UNAVAILABLE',
      msg: expect.stringMatching(/Too many uploads from this address/),
    });
    const other = from('10.0.0.2');
    await pause(300);
    expect(other.received()).toBe('');
    for (const c of held) expect(c.received()).toBe('');
    for (const c of clients.splice(0)) c.socket.destroy();
    await shim.close();

    shim = await startShim(fake.url, { server: { uploadsPerAddress: 2 } });
    from('10.0.0.1');
    from('10.0.0.2');
    await pause(200);
    expect(await from('10.0.0.3').status).toBe(503);
  });

  it('the client address: the peer, or behind trusted proxies the last forwarded address that is not one', () => {
    const req = (peer: string, xff?: string) =>
      ({ socket: { remoteAddress: peer } as Socket, headers: xff === undefined ? {} : { 'x-forwarded-for': xff } }) as IncomingMessage;
    const none = new TrustedProxies([]);
    const proxies = new TrustedProxies(['10.0.0.0/8']);
    expect(clientAddressOf(req('203.0.113.9', '198.51.100.1'), none)).toBe('203.0.113.9');
    expect(clientAddressOf(req('::ffff:203.0.113.9'), none)).toBe('203.0.113.9');
    expect(clientAddressOf(req('10.0.0.1', '198.51.100.1, 10.0.0.7'), proxies)).toBe('198.51.100.1');
    expect(clientAddressOf(req('10.0.0.1', 'spoofed, 198.51.100.1'), proxies)).toBe('198.51.100.1');
    expect(clientAddressOf(req('10.0.0.1', '10.0.0.3, 10.0.0.7'), proxies)).toBe('10.0.0.3');
    expect(clientAddressOf(req('10.0.0.1', 'garbage'), proxies)).toBe('10.0.0.1');
    expect(clientAddressOf(req('10.0.0.1'), proxies)).toBe('10.0.0.1');
  });
});
