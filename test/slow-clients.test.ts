import net from 'node:net';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { sendRaw } from './support/http-client.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * X11: no client holds what others need. Clients that drip their request bodies hold an
 * upstream connection each while they drip (the body streams through); they must never take
 * the connections the shim's own calls need, and they are answered 408 at the body deadline,
 * their upstream connection released.
 */

let fake: FakeZulip;
let shim: RunningShim;
const sockets: net.Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  await shim?.close();
  await fake?.stop();
});

/** A client that sends its head and one byte of a 100-byte body, then nothing; what it got back. */
function slowUpload(path: string): { answer: Promise<string>; received: () => string } {
  const { port } = new URL(shim.url);
  const s = net.connect(Number(port), '127.0.0.1');
  sockets.push(s);
  let got = '';
  const answer = new Promise<string>((resolve) => {
    s.on('data', (d) => {
      got += String(d);
    });
    s.on('close', () => resolve(got));
    s.on('error', () => resolve(got));
  });
  s.write(
    `POST ${path} HTTP/1.1\r\nHost: chat.example.com\r\nAuthorization: ${fake.auth(11)}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nt`,
  );
  return { answer, received: () => got };
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('slow request bodies (X11)', () => {
  it('more slow uploads than upstream connections leave presence and the own profile answering at once', async () => {
    fake = await startFake({ era: '2.1' });
    for (const u of fake.humans()) fake.report(u.user_id, 'active');
    shim = await startShim(fake.url, { upstream: { maxSockets: 4 }, server: { bodyTimeoutMs: 2_000 } });
    const uploads = Array.from({ length: 6 }, () => slowUpload('/api/v1/messages'));
    await pause(200); // every upload has reached the upstream and holds a connection there
    const presence = await request(shim.url)
      .post('/api/v1/users/me/presence')
      .set('Host', 'chat.example.com')
      .set('Authorization', fake.auth(12))
      .type('form')
      .send({ status: 'active', last_update_id: '-1' });
    const me = await request(shim.url).get('/api/v1/users/me').set('Host', 'chat.example.com').set('Authorization', fake.auth(12));
    expect(presence.status).toBe(200);
    expect(me.status).toBe(200);
    // Answered while every upload still holds its upstream connection, not after the deadline freed them.
    for (const { received } of uploads) expect(received()).toBe('');
    // At the body deadline each upload gets a Zulip-shaped 408 and its connection closes.
    for (const { answer } of uploads) {
      const text = await answer;
      expect(text).toMatch(/^HTTP\/1\.1 408/);
      expect(text).toMatch(/connection: close/i);
      expect(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))).toMatchObject({ result: 'error', code: 'BAD_REQUEST' });
    }
  });

  it('a slow body to an intercepted path gets a 408 at the deadline, with no upstream call for it', async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url, { server: { bodyTimeoutMs: 500 } });
    const before = fake.stats.presenceFull + fake.stats.presencePing;
    const text = await slowUpload('/api/v1/users/me/presence').answer;
    expect(text).toMatch(/^HTTP\/1\.1 408/);
    expect(fake.stats.presenceFull + fake.stats.presencePing).toBe(before);
  });
});

describe('a declared Content-Length is not memory (X11)', () => {
  const LIMIT = 256 * 1024 * 1024;
  const presenceHead = (length: number) =>
    'POST /api/v1/users/me/presence HTTP/1.1\r\nHost: chat.example.com\r\n' +
    `Content-Type: application/x-www-form-urlencoded\r\nContent-Length: ${length}\r\n\r\n`;

  it('a body declared just under the limit, of which a few bytes come, holds only those bytes until its 408', async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url, { server: { bodyLimitBytes: LIMIT, bodyTimeoutMs: 1_000 } });
    const before = process.memoryUsage().arrayBuffers;
    let most = before;
    let settled = false;
    // A client that declares 256 MiB, sends 15 bytes and then nothing (the shim runs in this process).
    const answer = sendRaw(shim.url, Buffer.from(`${presenceHead(LIMIT - 1)}status=active&`), 10_000).finally(() => (settled = true));
    while (!settled) {
      most = Math.max(most, process.memoryUsage().arrayBuffers);
      await pause(10);
    }
    // The 408 says the shim was waiting for the rest of that body the whole time memory was sampled.
    const a = await answer;
    expect(a.status).toBe(408);
    expect(JSON.parse(a.body.toString())).toMatchObject({ result: 'error', code: 'BAD_REQUEST' });
    // Nothing of the declared size was allocated for it: a buffer of it would be 256 MiB.
    expect(most - before).toBeLessThan(16 * 1024 * 1024);
  });

  it('a body declared over the limit gets the 413 at once, without waiting for any of it', async () => {
    fake = await startFake({ era: '2.1' });
    shim = await startShim(fake.url, { server: { bodyLimitBytes: LIMIT, bodyTimeoutMs: 5_000 } });
    const a = await sendRaw(shim.url, Buffer.from(presenceHead(1_000_000_000)), 10_000);
    // A 413, not the body deadline's 408: the shim did not wait for the body.
    expect(a.status).toBe(413);
    expect(JSON.parse(a.body.toString())).toEqual({
      result: 'error',
      msg: `Request body too large (limit ${LIMIT} bytes)`,
      code: 'BAD_REQUEST',
    });
  });
});
