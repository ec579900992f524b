import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { riskySetups } from '../src/checks.js';
import { envNearMiss, loadConfig } from '../src/config/index.js';
import { logLine, runCli, until } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { startShim } from './support/shim.js';
import { EVENT_WAIT } from './support/wait.js';

/**
 * Issue 48, the hints an operator needs where a silent mistake costs security or a working
 * service: a misspelt upstream variable named in the no-upstream error, near misses of the
 * security settings, three risky set-ups warned of at start-up (each naming what silences it),
 * and an X-Forwarded-Proto from an untrusted peer said once a realm. Checked by their exact words.
 */

const CLI_TIMEOUT = { timeout: 60_000 };

describe('the no-upstream error names a near miss of the variable', () => {
  it.each([
    ['UPSTREM_URL', 'UPSTREAM_URL'],
    ['UPSTREAM', 'UPSTREAM_URL'],
    ['upstream_url', 'UPSTREAM_URL'],
    ['REPLAY', 'REPLAY_HAR'],
  ])('%s', (name, meant) => {
    expect(() => loadConfig([], { [name]: 'http://127.0.0.1:9' })).toThrow(
      `no upstream: give --upstream URL (UPSTREAM_URL, upstream.url) for a Zulip server, or --demo (DEMO=true) to try the bundled recording (${name} is set, but the variable is ${meant})`,
    );
  });
});

describe('near misses of the settings whose silent miss changes security: up to two edits, other programs’ spellings', () => {
  it.each([
    ['TRUST_PROXIES', 'TRUST_PROXY'],
    ['TRUSTED_PROXIES', 'TRUST_PROXY'],
    ['TRUSTED_PROXY', 'TRUST_PROXY'],
    ['TRUST_PROXYS', 'TRUST_PROXY'],
    ['REALM_HOST', 'REALM_HOSTS'],
    ['REALMS_HOSTS', 'REALM_HOSTS'],
  ])('%s → %s', (name, meant) => {
    expect(envNearMiss(name)).toBe(meant);
  });

  it('but not words that only share a part', () => {
    for (const name of ['PROXY', 'TRUST', 'HTTP_PROXY', 'ALLOWED_HOSTS']) expect(envNearMiss(name), name).toBeUndefined();
  });

  it('--check=config names them, and the flag spelt so gets the right one', CLI_TIMEOUT, async () => {
    const check = runCli(['--check=config', '--demo'], { env: { TRUST_PROXIES: '127.0.0.1' } });
    expect(await check.exited).toBe(0);
    expect(check.stdout).toEqual([
      'zulip-compat-shim: check: configuration: valid',
      "zulip-compat-shim: check: environment: TRUST_PROXIES is set but is no setting of the shim's (did you mean TRUST_PROXY?)",
    ]);
    const flag = runCli(['--demo', '--trusted-proxies', '127.0.0.1']);
    expect(await flag.exited).toBe(2);
    expect(flag.stderr.join('')).toBe(
      'zulip-compat-shim: invalid configuration: --trusted-proxies: unknown option (did you mean --trust-proxy?)\n',
    );
  });
});

const METRICS_AND_REALMS =
  "server.host (--host) is 0.0.0.0, every interface: /metrics is answered there to anyone, and any Host name is taken for a realm; give --realm-hosts (REALM_HOSTS, server.realmHosts) the realm's names, or --admin-listen (ADMIN_LISTEN, server.adminListen) a listener of its own for /metrics, to silence this";
const EVERYONE_TRUSTED =
  "server.trustProxy (TRUST_PROXY) trusts every address (0.0.0.0/0): any client can set X-Forwarded-Proto, X-Forwarded-Host, X-Request-Id and the client address the access log and the new-realm share go by; name only your proxies' addresses in --trust-proxy (TRUST_PROXY, server.trustProxy) to silence this";
const PLAIN_HTTP =
  'upstream.url (--upstream) is plain http to another host (zulip.internal:8080): API keys, passwords and messages cross the network unencrypted; give --upstream (UPSTREAM_URL, upstream.url) an https:// URL to silence this';

describe('risky set-ups: one warning each, naming what silences it', () => {
  const risky = (args: string[], env: NodeJS.ProcessEnv = {}) => {
    const { config, sources } = loadConfig(args, env);
    return riskySetups(config, sources);
  };

  it('says the three by their words', () => {
    expect(risky(['--upstream', 'http://zulip.internal:8080', '--host', '0.0.0.0'], { TRUST_PROXY: '0.0.0.0/0' })).toEqual([
      METRICS_AND_REALMS,
      EVERYONE_TRUSTED,
      PLAIN_HTTP,
    ]);
    expect(risky(['--demo'], { TRUST_PROXY: '10.0.0.4,::/0' })[0]).toMatch(/trusts every address \(::\/0\)/);
  });

  it('says nothing where the named setting is given, or the set-up is not risky', () => {
    const https = ['--upstream', 'https://zulip.internal'];
    expect(risky([...https, '--host', '0.0.0.0', '--realm-hosts', 'chat.example.com'])).toEqual([]);
    expect(risky([...https, '--host', '0.0.0.0', '--admin-listen', '127.0.0.1:9993'])).toEqual([]);
    expect(risky([...https, '--host', '127.0.0.1', '--trust-proxy', '10.0.0.0/8'])).toEqual([]);
    for (const local of ['http://127.0.0.1:9992', 'http://localhost:9992', 'http://[::1]:9992']) {
      expect(risky(['--upstream', local]), local).toEqual([]);
    }
  });

  it('--check=config says them; a start logs them as warnings and serves', CLI_TIMEOUT, async () => {
    const args = ['--upstream', 'http://zulip.internal:8080', '--host', '0.0.0.0', '--port', '0'];
    const check = runCli(['--check=config', ...args], { env: { TRUST_PROXY: '0.0.0.0/0' } });
    expect(await check.exited).toBe(0);
    expect(check.stdout).toEqual([
      'zulip-compat-shim: check: configuration: valid',
      ...[METRICS_AND_REALMS, EVERYONE_TRUSTED, PLAIN_HTTP].map((w) => `zulip-compat-shim: check: warning: ${w}`),
    ]);
    const run = runCli(args, { env: { TRUST_PROXY: '0.0.0.0/0' } });
    try {
      await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      for (const w of [METRICS_AND_REALMS, EVERYONE_TRUSTED, PLAIN_HTTP]) expect(logLine(run, w)).toMatchObject({ level: 40 });
    } finally {
      run.child.kill('SIGKILL');
    }
  });
});

describe('X-Forwarded-Proto from a peer not trusted: replaced, and said once a realm', () => {
  let fake: FakeZulip;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
  });
  afterAll(async () => {
    await fake.stop();
  });

  /** A GET with this Host (fetch would not send it) and X-Forwarded-Proto: the X-Forwarded-Proto the upstream saw. */
  const get = (url: string, host: string, proto: string) =>
    new Promise<string | undefined>((done, fail) => {
      const { hostname, port } = new URL(url);
      http
        .get({ host: hostname, port, path: '/test/echo', headers: { host, 'x-forwarded-proto': proto } }, (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => done((JSON.parse(body) as { headers: Record<string, string> }).headers['x-forwarded-proto']));
        })
        .on('error', fail);
    });
  const WORDS = (realm: string) =>
    `X-Forwarded-Proto: https from 127.0.0.1, a peer not in --trust-proxy (TRUST_PROXY, server.trustProxy), went on as http for ${realm}; if it is your TLS proxy, name it in --trust-proxy, or Zulip takes this realm's browser calls for plain HTTP (a CSRF 403). Said once a realm`;

  it('an untrusted peer: one warning per realm, whatever the number of requests', async () => {
    const shim = await startShim(fake.url);
    try {
      for (const host of ['chat.example.com', 'chat.example.com', 'other.example.com', 'chat.example.com']) {
        expect(await get(shim.url, host, 'https')).toBe('http');
      }
      // The same scheme as the shim's own: nothing replaced that matters.
      expect(await get(shim.url, 'third.example.com', 'http')).toBe('http');
      const warnings = () =>
        shim.logs
          .map((l) => JSON.parse(l) as { level: number; msg: string })
          .filter((l) => l.msg.startsWith('X-Forwarded-Proto'))
          .map((l) => [l.level, l.msg]);
      await vi.waitFor(() => expect(warnings()).toHaveLength(2), EVENT_WAIT);
      expect(warnings()).toEqual([
        [40, WORDS('chat.example.com')],
        [40, WORDS('other.example.com')],
      ]);
    } finally {
      await shim.close();
    }
  });

  it('a trusted peer: kept, and nothing said', async () => {
    const shim = await startShim(fake.url, { server: { trustProxy: ['127.0.0.1'] } });
    try {
      expect(await get(shim.url, 'chat.example.com', 'https')).toBe('https');
      await new Promise((r) => setTimeout(r, 100));
      expect(shim.logs.filter((l) => l.includes('X-Forwarded-Proto:'))).toEqual([]);
    } finally {
      await shim.close();
    }
  });
});

describe('--check=config: what a start would refuse of the files, without the network', () => {
  it.each([
    [['--replay', '/nonexistent/session.har'], 'replay.har (--replay): cannot read /nonexistent/session.har (ENOENT)'],
    [
      ['--upstream', 'http://127.0.0.1:1', '--record', '/nonexistent/x.har'],
      'record.har (--record): cannot write /nonexistent/x.har (ENOENT)',
    ],
    [['--demo', '--record', '/tmp/x.har'], 'record.har (--record): recording needs --upstream URL'],
  ])('%j', CLI_TIMEOUT, async (args, words) => {
    const run = runCli(['--check=config', ...args]);
    expect(await run.exited).toBe(2);
    expect(run.stdout).toEqual([]);
    expect(run.stderr.join('')).toBe(`zulip-compat-shim: invalid configuration: ${words}\n`);
  });

  it('an upstream that does not answer is no concern of it', CLI_TIMEOUT, async () => {
    const run = runCli(['--check=config', '--upstream', 'http://127.0.0.1:1', '--redis', 'redis://127.0.0.1:1']);
    expect(await run.exited).toBe(0);
    expect(run.stdout).toEqual(['zulip-compat-shim: check: configuration: valid']);
  });
});
