import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config/index.js';
import { oneErrorLine, runCli } from './support/cli-run.js';
import { startFakeBouncer, type FakeBouncer } from './support/fake-bouncer.js';
import { failing, startFake, type FakeZulip } from './support/fake-zulip.js';
import { judgeAt } from './support/app-parsers.js';
import { systemPort } from './support/ports.js';
import { fcmData, notifyBody, payloadsOf, REALM_URL } from './support/push-notifications.js';
import { bytesOf, NOTIFY, serverCall, serverHeaders } from './support/push-relay.js';
import { startShim, type RunningShim } from './support/shim.js';

/**
 * M7 at its edges: the client port is no relay; a bouncer that cannot be reached or stays silent
 * gets the server the relay's own 502 or 504 (so the server retries as it would); a realm whose
 * server_settings cannot be had still gets its notification with both fields; the relay closes
 * with the shim; its settings are checked as every setting is.
 */

type Json = Record<string, unknown>;

let fake: FakeZulip;
let bouncer: FakeBouncer;
beforeAll(async () => {
  fake = await startFake({ era: '7.0' });
  bouncer = await startFakeBouncer();
});
afterAll(async () => {
  await bouncer?.stop();
  await fake?.stop();
});

async function withRelay(over: Record<string, unknown>, f: (shim: RunningShim, relayUrl: string) => Promise<void>): Promise<void> {
  const shim = await startShim(fake.url, { push: { relayListen: '127.0.0.1:0', bouncerUrl: bouncer.url }, ...over });
  try {
    const at = await shim.shim.listenPushRelay();
    await f(shim, at!.url);
  } finally {
    await shim.close();
  }
}

describe('the client port', () => {
  it('does not answer /api/v1/remotes/… as the relay: it goes to the upstream untouched, never to the bouncer', async () => {
    await withRelay({}, async (shim) => {
      const sent = bytesOf(notifyBody('7.0', 'message'));
      bouncer.calls.length = 0;
      fake.seen = [];
      const answer = await serverCall(shim.url, 'POST', NOTIFY, sent, { ...serverHeaders('7.0'), host: 'chat.example.com' });
      expect(answer.status).toBe(404); // the fake Zulip's answer, as a Zulip server without a bouncer of its own
      expect(bouncer.calls).toEqual([]);
      const seen = fake.seen.find((s) => s.url === NOTIFY);
      expect(seen?.body.equals(sent)).toBe(true);
    });
  });

  it('without --push-relay-listen there is no relay at all', async () => {
    const shim = await startShim(fake.url);
    try {
      expect(shim.shim.pushRelayServer).toBeUndefined();
      expect(await shim.shim.listenPushRelay()).toBeUndefined();
    } finally {
      await shim.close();
    }
  });
});

describe('a bouncer that gives no answer', () => {
  it('cannot be reached: the relay answers 502 UPSTREAM_UNAVAILABLE in its own words', async () => {
    const closed = `http://127.0.0.1:${await systemPort()}`;
    await withRelay({ push: { relayListen: '127.0.0.1:0', bouncerUrl: closed } }, async (_shim, relayUrl) => {
      const answer = await serverCall(relayUrl, 'POST', NOTIFY, bytesOf(notifyBody('7.0', 'message')));
      expect(answer.status).toBe(502);
      expect(JSON.parse(answer.body.toString())).toMatchObject({
        result: 'error',
        code: 'UPSTREAM_UNAVAILABLE',
        msg: expect.stringContaining('push notification bouncer'),
      });
    });
  });

  it('stays silent past upstream.timeoutMs: 504 UPSTREAM_TIMEOUT', async () => {
    bouncer.reply = () => 'hang';
    try {
      await withRelay({ upstream: { timeoutMs: 300 } }, async (_shim, relayUrl) => {
        const answer = await serverCall(relayUrl, 'POST', '/api/v1/remotes/push/register', Buffer.from('token=x'));
        expect(answer.status).toBe(504);
        expect(JSON.parse(answer.body.toString())).toMatchObject({ code: 'UPSTREAM_TIMEOUT' });
      });
    } finally {
      bouncer.reply = () => ({ status: 200, body: '{"result":"success","msg":""}' });
    }
  });
});

describe('a realm whose server_settings cannot be had', () => {
  it.each([
    ['the upstream fails them', true, {}],
    ['its host is not admitted (--realm-hosts)', false, { server: { realmHosts: ['other.example.org'] } }],
  ])('%s: both fields all the same, realm_name the realm’s host', async (_why, fails, over) => {
    const down = await startFake({ era: '7.0' });
    if (fails) down.override = failing('GET', '/api/v1/server_settings');
    const shim = await startShim(down.url, { push: { relayListen: '127.0.0.1:0', bouncerUrl: bouncer.url }, ...over });
    try {
      const relayUrl = (await shim.shim.listenPushRelay())!.url;
      const answer = await serverCall(relayUrl, 'POST', NOTIFY, bytesOf(notifyBody('7.0', 'message')));
      expect(answer.status).toBe(200);
      const got = payloadsOf(JSON.parse(bouncer.calls.at(-1)!.body.toString()) as Json);
      for (const p of [got.gcm, got.apns]) expect(p).toMatchObject({ realm_url: REALM_URL, realm_name: 'chat.example.com' });
      expect(judgeAt('sweep-2436').parseProblems('LegacyFcmMessage', fcmData(got.gcm))).toEqual([]);
      expect(shim.logs.some((l) => l.includes("the realm's server_settings could not be had"))).toBe(true);
    } finally {
      await shim.close();
      await down.stop();
    }
  });
});

describe('the relay with the shim', () => {
  it('a notification larger than server.bodyLimitBytes goes on unread, byte for byte', async () => {
    await withRelay({ server: { bodyLimitBytes: 64 } }, async (_shim, relayUrl) => {
      const sent = bytesOf(notifyBody('7.0', 'message'));
      await serverCall(relayUrl, 'POST', NOTIFY, sent);
      expect(bouncer.calls.at(-1)!.body.equals(sent)).toBe(true);
    });
  });

  it('closes with the shim (the drain), its kept-alive connections too', async () => {
    const shim = await startShim(fake.url, {
      push: { relayListen: '127.0.0.1:0', bouncerUrl: bouncer.url },
      server: { shutdownGraceMs: 2000 },
    });
    const relayUrl = (await shim.shim.listenPushRelay())!.url;
    await serverCall(relayUrl, 'POST', '/api/v1/remotes/push/register', Buffer.from('token=x'));
    const started = Date.now();
    await shim.close();
    expect(Date.now() - started).toBeLessThan(1500);
    expect(shim.shim.pushRelayServer!.listening).toBe(false);
  });
});

describe('--push-relay-listen and --push-bouncer-url', () => {
  it('default: no relay; the bouncer is Zulip’s service', () => {
    const { config } = loadConfig(['--demo'], {});
    expect(config.push).toEqual({ bouncerUrl: 'https://push.zulipchat.com' });
  });

  it.each([
    [
      ['--push-relay-listen', 'nonsense'],
      {},
      'push.relayListen (--push-relay-listen): must be HOST:PORT, e.g. 127.0.0.1:9993 or [::1]:9993 (got "nonsense")',
    ],
    [
      [],
      { PUSH_RELAY_LISTEN: '9994' },
      'push.relayListen (PUSH_RELAY_LISTEN): must be HOST:PORT, e.g. 127.0.0.1:9993 or [::1]:9993 (got "9994")',
    ],
    [['--push-bouncer-url', 'ftp://push.example.com'], {}, 'push.bouncerUrl (--push-bouncer-url): must be an http:// or https:// URL'],
    [
      ['--push-bouncer-url', 'https://push.example.com/api/v1'],
      {},
      "push.bouncerUrl (--push-bouncer-url): must be the bouncer's origin only (https://push.zulipchat.com), without a path or query",
    ],
    [
      ['--push-bouncer-url', 'https://id:key@push.example.com'],
      {},
      'push.bouncerUrl (--push-bouncer-url): must not contain a user name or password',
    ],
  ])('%j %j: %s', (argv, env, message) => {
    expect(() => loadConfig(['--demo', ...argv], env)).toThrow(ConfigError);
    expect(() => loadConfig(['--demo', ...argv], env)).toThrow(message);
  });

  it('a trailing slash on the bouncer URL is the origin all the same', () => {
    expect(loadConfig(['--demo', '--push-bouncer-url', 'https://push.example.com/'], {}).config.push.bouncerUrl).toBe(
      'https://push.example.com',
    );
  });
});

describe.concurrent('from the command line', { timeout: 60_000 }, () => {
  it('a relay port in use: exit 2, one line naming push.relayListen', async () => {
    const taken = net.createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    const { port } = taken.address() as net.AddressInfo;
    try {
      const line = await oneErrorLine(runCli(['--upstream', fake.url, '--port', '0', '--push-relay-listen', `127.0.0.1:${port}`]));
      expect(line).toBe(
        `zulip-compat-shim: invalid configuration: push.relayListen (--push-relay-listen): port ${port} on 127.0.0.1 is already in use`,
      );
    } finally {
      await new Promise((r) => taken.close(r));
    }
  });

  it('--check reaches the bouncer where there is a relay: one line, and exit 2 when it does not answer', async () => {
    const good = runCli(['--check', '--upstream', fake.url, '--push-relay-listen', '127.0.0.1:0', '--push-bouncer-url', bouncer.url]);
    expect(await good.exited).toBe(0);
    expect(good.stdout).toContain(`zulip-compat-shim: check: push bouncer ${bouncer.url}: answers (HTTP 200)`);
    const closed = `http://127.0.0.1:${await systemPort()}`;
    const bad = runCli(['--check', '--upstream', fake.url, '--push-relay-listen', '127.0.0.1:0', '--push-bouncer-url', closed]);
    expect(await bad.exited).toBe(2);
    expect(bad.stdout.find((l) => l.includes('push bouncer'))).toMatch(
      new RegExp(`^zulip-compat-shim: check: push bouncer ${closed}: does not answer \\(`),
    );
    const none = runCli(['--check', '--upstream', fake.url]);
    expect(await none.exited).toBe(0);
    expect(none.stdout.some((l) => l.includes('push bouncer'))).toBe(false);
  });
});
