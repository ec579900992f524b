import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/index.js';
import { ConfigError, createShim, resolveConfig, type Shim } from '../src/index.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';

/**
 * The embedding API (`import { createShim } from 'zulip-compat-shim'`), as a program that starts
 * a shim inside itself uses it: options named and validated as the configuration is, errors
 * thrown as ConfigError, a request handler, listen, a drain on close, the metrics registry.
 */

const modernPoll = (fake: FakeZulip, host: string) => ({
  method: 'POST',
  headers: { host, authorization: fake.auth(10), 'content-type': 'application/x-www-form-urlencoded' },
  body: 'status=active&last_update_id=-1',
});

describe('createShim: options as the configuration', () => {
  it('fills in the defaults of config/default.json, as the command does', () => {
    expect(resolveConfig({ replay: { demo: true } })).toEqual(loadConfig(['--demo'], {}).config);
  });

  it.each([
    [{ replay: { demo: true }, server: { port: 70000 } }, 'server.port (options): must be a port number, 0 to 65535'],
    [{ replay: { demo: true }, server: { prot: 1 } }, 'server.prot (options): unknown key (did you mean server.port?)'],
    [{ upstream: { url: 'ftp://x' } }, 'upstream.url (options): must be an http:// or https:// URL'],
    [
      { upstream: { url: 'http://a.example' }, replay: { demo: true } },
      'replay.demo (options): give one of --upstream, --replay or --demo',
    ],
    [{}, 'no upstream: give upstream.url for a Zulip server, replay.har for a recording, or replay.demo: true for the bundled one'],
    [
      { upstream: { url: 'http://a.example' }, store: { redisUrl: 'redis://127.0.0.1:1' }, server: { workers: 2 } },
      'server.workers (options): removed: the shim runs as one process; to use more cores, run several replicas',
    ],
  ])('%j is a ConfigError: %s', async (options, words) => {
    const thrown = await createShim(options as never).catch((e: unknown) => e);
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as ConfigError).message).toContain(words);
  });

  it('words a schema error as the command does, naming the options instead of the flag', () => {
    const cli = (() => {
      try {
        loadConfig(['--demo', '--port', '70000'], {});
      } catch (e) {
        return (e as Error).message;
      }
    })();
    expect(cli).toBe('server.port (--port): must be a port number, 0 to 65535');
    expect(() => resolveConfig({ replay: { demo: true }, server: { port: 70000 } })).toThrow(cli!.replace('(--port)', '(options)'));
  });

  it('an unreadable HAR file is a ConfigError naming replay.har', async () => {
    const thrown = await createShim({ replay: { har: '/nonexistent/x.har' } }).catch((e: unknown) => e);
    expect(thrown).toBeInstanceOf(ConfigError);
    expect((thrown as Error).message).toMatch(/^replay\.har \(options\): /);
  });
});

describe('createShim: serving', () => {
  let fake: FakeZulip;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
  });
  afterAll(() => fake.stop());

  it('listens on a free port, answers the modern API, passes the rest through, and drains on close', async () => {
    const shim = await createShim({ upstream: { url: fake.url }, server: { port: 0 }, log: { level: 'silent' } });
    const { url, port, host } = await shim.listen();
    expect(url).toBe(`http://${host}:${port}`);
    // The configuration says where it listens: the port picked for 0.
    expect(port).toBeGreaterThan(0);
    expect(shim.config.server.port).toBe(port);
    expect(shim.upstream).toBe(fake.url);
    const poll = await fetch(`${url}/api/v1/users/me/presence`, modernPoll(fake, 'chat.example.com'));
    expect(poll.status).toBe(200);
    expect(await poll.json()).toHaveProperty('presence_last_update_id');
    const echo = await fetch(`${url}/test/echo?x=1`);
    expect(((await echo.json()) as { url: string }).url).toBe('/test/echo?x=1');
    expect(await shim.metrics.metrics()).toMatch(/^zulip_compat_shim_/m);
    await shim.close();
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
  });

  it("is a request handler for a server of one's own; close() waits for its in-flight answers", async () => {
    const shim: Shim = await createShim({ upstream: { url: fake.url }, log: { level: 'silent' } });
    const server = http.createServer(shim.handler);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      fake.resetStats();
      let release!: () => void;
      fake.fullPresenceHeld = new Promise<void>((r) => {
        release = r;
      });
      const answered = fetch(`${url}/api/v1/users/me/presence`, modernPoll(fake, 'held.example.com'));
      while (fake.stats.presenceFull === 0) await new Promise((r) => setTimeout(r, 10));
      let closed = false;
      const closing = shim.close().then(() => {
        closed = true;
      });
      await new Promise((r) => setTimeout(r, 300));
      expect(closed).toBe(false);
      fake.fullPresenceHeld = undefined;
      release();
      expect((await answered).status).toBe(200);
      await closing;
      expect(closed).toBe(true);
      // After close, a request handed over is told the shim is stopping.
      const late = await fetch(`${url}/api/v1/users/me/presence`, modernPoll(fake, 'held.example.com'));
      expect(late.status).toBe(503);
    } finally {
      fake.fullPresenceHeld = undefined;
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});

describe("createShim: the logger option (an application's own pino)", () => {
  let fake: FakeZulip;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
  });
  afterAll(() => fake.stop());

  it("writes the shim's lines and access lines through the given pino instance, at its level", async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'info', base: { app: 'mine' } }, { write: (l: string) => void lines.push(JSON.parse(l)) });
    const shim = await createShim({ upstream: { url: fake.url }, logger, log: { level: 'silent' } });
    const { url } = await shim.listen(0, '127.0.0.1');
    try {
      expect((await fetch(`${url}/api/v1/users/me/presence`, modernPoll(fake, 'chat.example.com'))).status).toBe(200);
      await new Promise((r) => setTimeout(r, 50));
      // An X-Forwarded-Proto from a peer not trusted: a warning, through the given logger.
      const proxied = modernPoll(fake, 'chat.example.com');
      await fetch(`${url}/api/v1/users/me/presence`, { ...proxied, headers: { ...proxied.headers, 'x-forwarded-proto': 'https' } });
      await new Promise((r) => setTimeout(r, 50));
      // log.level 'silent' is not used: the given logger's own level (info) says what is written.
      expect(lines.some((l) => l.app === 'mine' && l.level === 40 && /X-Forwarded-Proto/.test(String(l.msg)))).toBe(true);
      expect(lines.some((l) => l.msg === 'request completed' && (l.req as { path: string }).path === '/api/v1/users/me/presence')).toBe(
        true,
      );
    } finally {
      await shim.close();
    }
  });
});
