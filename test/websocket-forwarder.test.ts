import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startRecorder } from '../src/har/recorder.js';
import { capturedLog } from './support/captured-log.js';
import { webSocketForwarder, type WebSocketForwarder } from '../src/proxy/websocket.js';
import { rawUpgrade } from './support/http-client.js';

/** An upstream that switches protocols on every upgrade and then echoes what it reads; `upgrades()` counts those it got. */
async function echoingUpstream(): Promise<{ url: string; server: http.Server; upgrades: () => number }> {
  const server = http.createServer((_req, res) => res.writeHead(426).end());
  let upgrades = 0;
  server.on('upgrade', (_req, socket, head) => {
    upgrades++;
    socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n');
    if (head.length) socket.write(head);
    socket.pipe(socket);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, upgrades: () => upgrades };
}

/** A server in front whose upgrades go to `forwarder` (and then, with `thenClose`, closes it at once). */
async function front(forwarder: WebSocketForwarder, thenClose = false): Promise<{ port: number; server: http.Server }> {
  const server = http.createServer((_req, res) => res.writeHead(404).end());
  server.on('upgrade', (req, socket, head) => {
    forwarder.ws(req, socket, head);
    if (thenClose) void forwarder.close();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as AddressInfo).port, server };
}

const closers: Array<() => void> = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

/** An echoing upstream, a forwarder to it and a server in front of that, all closed after the test. */
async function chain(thenClose = false) {
  const up = await echoingUpstream();
  const forwarder = webSocketForwarder({ target: up.url, insecureTls: false, log: capturedLog('warn').log, failure: 'upgrade failed' });
  const f = await front(forwarder, thenClose);
  closers.push(
    () => up.server.close(),
    () => f.server.close(),
    () => void forwarder.close(),
  );
  return { up, forwarder, port: f.port };
}

describe('the WebSocket forwarder (T1)', () => {
  it('hands the upgraded connection to the upstream: its 101, then bytes both ways', async () => {
    const { port } = await chain();
    // The first upgrade loads the library; the second finds it loaded.
    for (const word of ['first', 'second']) {
      const text = await rawUpgrade(port, { after: `${word} frame` });
      expect(text).toMatch(/^HTTP\/1\.1 101 Switching Protocols\r\n/);
      expect(text.endsWith(`${word} frame`)).toBe(true);
    }
  });

  it('closes an upgrade that comes after close(), unanswered', async () => {
    const { up, forwarder, port } = await chain();
    await forwarder.close();
    expect(await rawUpgrade(port, { after: 'frame' })).toBe('');
    expect(up.upgrades()).toBe(0);
  });

  it('closes an upgrade it was handed just before close(), while the library was still loading, unanswered', async () => {
    const { up, port } = await chain(true);
    expect(await rawUpgrade(port, { after: 'frame' })).toBe('');
    expect(up.upgrades()).toBe(0);
  });

  it('closes the connection and says so when the upstream cannot be reached (E4: the process stays up)', async () => {
    const { lines, log } = capturedLog('warn');
    const forwarder = webSocketForwarder({ target: 'http://127.0.0.1:1', insecureTls: false, log, failure: 'upgrade failed' });
    const f = await front(forwarder);
    closers.push(
      () => f.server.close(),
      () => forwarder.close(),
    );
    expect(await rawUpgrade(f.port, { after: 'frame' })).toBe('');
    expect(lines.some((l) => l.includes('"msg":"upgrade failed"') && l.includes('"path":"/ws"'))).toBe(true);
  });

  it('serves the recorder too: its upgrades reach the upstream, and go unrecorded', async () => {
    const up = await echoingUpstream();
    const dir = mkdtempSync(join(tmpdir(), 'zcs-ws-'));
    const file = join(dir, 'ws.har');
    const recorder = await startRecorder({ upstream: up.url, file, log: capturedLog('warn').log, flushMs: 20 });
    closers.push(
      () => up.server.close(),
      () => rmSync(dir, { recursive: true, force: true }),
    );
    try {
      const text = await rawUpgrade(Number(new URL(recorder.url).port), { after: 'through the recorder' });
      expect(text).toMatch(/^HTTP\/1\.1 101 Switching Protocols\r\n/);
      expect(text.endsWith('through the recorder')).toBe(true);
    } finally {
      await recorder.close();
    }
    expect((JSON.parse(readFileSync(file, 'utf8')) as { log: { entries: unknown[] } }).log.entries).toEqual([]);
  });
});
