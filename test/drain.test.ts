import { EventEmitter, once } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import net from 'node:net';
import type { Dispatcher } from 'undici';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import type { Logger } from '../src/observability/logger.js';
import { PassThroughExchange } from '../src/proxy/passthrough.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { send } from './support/http-client.js';
import { startShim } from './support/shim.js';

/**
 * X9: at the drain deadline a held pass-through long poll is answered 503 by the shim, and its
 * upstream request is aborted with it, not left open upstream until the server has finished
 * closing (which another connection, here one with half a request sent, can hold up).
 */

let fake: FakeZulip;
beforeAll(async () => {
  fake = await startFake({ era: '5.0' });
});
afterAll(async () => {
  await fake?.stop();
});

it('the drain deadline aborts the upstream long poll of the request it answers 503', async () => {
  const shim = await startShim(fake.url, { server: { shutdownGraceMs: 100 } });
  let upstreamClosed: Promise<unknown> | undefined;
  let closedBeforeFinalCut: boolean | undefined;
  fake.override = (req, res) => {
    if (!req.url?.startsWith('/api/v1/events')) return false;
    upstreamClosed = once(res, 'close').then(() => {
      closedBeforeFinalCut = !slowAtShim.destroyed;
    });
    return true; // held: never answered
  };
  // A connection in the middle of its request head: not idle, so the server cannot finish
  // closing before its final cut (FINAL_CLOSE_MS after the deadline). Its cut is watched on the
  // shim's side: without the abort, the upstream request is closed only after it (when the
  // shared transport is closed, once the server has closed).
  const accepted = once(shim.shim.server, 'connection') as Promise<[net.Socket]>;
  const slow = net.connect(Number(new URL(shim.url).port), '127.0.0.1');
  slow.on('error', () => {});
  await once(slow, 'connect');
  slow.write('GET /api/v1/server_settings HTTP/1.1\r\nHost: ');
  const [slowAtShim] = await accepted;
  try {
    const poll = send(
      shim.url,
      { method: 'GET', path: '/api/v1/events?queue_id=q&last_event_id=-1', headers: { authorization: fake.auth(10) } },
      { timeoutMs: 10_000 },
    );
    for (let i = 0; i < 200 && !upstreamClosed; i++) await new Promise((r) => setTimeout(r, 10));
    expect(upstreamClosed).toBeDefined();
    const closing = shim.close();
    const answer = await poll;
    expect(answer.status).toBe(503);
    expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/); // the shim's answer, with the request's id
    await Promise.all([upstreamClosed, closing]);
    expect(closedBeforeFinalCut).toBe(true);
  } finally {
    fake.override = undefined;
    slow.destroy();
    await shim.close();
  }
}, 15_000);

it("an upstream failure after the shim has answered (the drain's 503) does not touch the ended answer", () => {
  const res = Object.assign(new EventEmitter(), { headersSent: true, writableEnded: true, destroyed: false, destroy: vi.fn() });
  const req = Object.assign(new EventEmitter(), { method: 'GET', url: '/api/v1/events', headers: {} });
  const warn = vi.fn();
  const exchange = new PassThroughExchange(
    req as unknown as IncomingMessage,
    res as unknown as ServerResponse,
    { warn } as unknown as Logger,
  );
  exchange.onResponseError({} as Dispatcher.DispatchController, Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }));
  expect(res.destroy).not.toHaveBeenCalled();
  expect(warn).not.toHaveBeenCalled();
});

it('from the drain on, the in-flight long poll is answered with Connection: close and a request that comes after is not taken', async () => {
  const shim = await startShim(fake.url, { server: { shutdownGraceMs: 5_000 } });
  const held: ServerResponse[] = [];
  fake.override = (req, res) => {
    if (!req.url?.startsWith('/api/v1/events')) return false;
    held.push(res);
    return true;
  };
  const connect = async () => {
    const socket = net.connect(Number(new URL(shim.url).port), '127.0.0.1');
    socket.on('error', () => {});
    const got = { text: '', closed: once(socket, 'close') };
    socket.on('data', (d: Buffer) => (got.text += d.toString()));
    await once(socket, 'connect');
    return { socket, got };
  };
  const poll = `GET /api/v1/events?queue_id=q&last_event_id=-1 HTTP/1.1\r\nHost: chat.example.com\r\nAuthorization: ${fake.auth(10)}\r\n`;
  const a = await connect();
  const b = await connect();
  try {
    a.socket.write(`${poll}\r\n`);
    b.socket.write(poll); // its head not yet ended
    for (let i = 0; i < 300 && held.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(held).toHaveLength(1);
    const closing = shim.close();
    b.socket.write('\r\n');
    await b.got.closed;
    expect(b.got.text).toMatch(/^HTTP\/1\.1 503 /);
    expect(b.got.text).toMatch(/\r\nconnection: close\r\n/i);
    expect(b.got.text).toContain('restarting');
    const body = JSON.stringify({ result: 'success', msg: '', events: [] });
    held[0]!.writeHead(200, { 'content-type': 'application/json', 'content-length': String(body.length) }).end(body);
    await a.got.closed;
    expect(a.got.text).toMatch(/^HTTP\/1\.1 200 /);
    expect(a.got.text).toMatch(/\r\nconnection: close\r\n/i);
    await closing;
    expect(held).toHaveLength(1); // b's long poll never reached the upstream
  } finally {
    fake.override = undefined;
    a.socket.destroy();
    b.socket.destroy();
    await shim.close();
  }
}, 15_000);
