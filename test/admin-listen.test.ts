import net from 'node:net';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseListenAddress } from '../src/config/index.js';
import { logLine, oneErrorLine, runCli, until } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { startShim } from './support/shim.js';
import { systemPort } from './support/ports.js';

/**
 * `--admin-listen HOST:PORT`: /healthz, /readyz and /metrics on a listener of their own; the
 * public port then answers them with a Zulip-shaped 404 and sends nothing upstream. Without the
 * flag, nothing changes.
 */

const OWN = ['/healthz', '/readyz', '/metrics'];
const NOT_FOUND = { result: 'error', msg: 'Not Found', code: 'BAD_REQUEST' };

let fake: FakeZulip;
beforeAll(async () => {
  fake = await startFake({ era: '2.1' });
});
afterAll(() => fake.stop());

describe('--admin-listen', () => {
  it('answers the three own paths on the admin listener, and not as its own on the public port', async () => {
    const shim = await startShim(fake.url, { server: { adminListen: '127.0.0.1:0' } });
    try {
      const admin = await shim.shim.listenAdmin();
      expect(admin?.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const adminUrl = admin!.url;
      const healthz = await request(adminUrl).get('/healthz');
      expect(healthz.status).toBe(200);
      expect(healthz.body).toMatchObject({ result: 'success', status: 'alive' });
      const readyz = await request(adminUrl).get('/readyz');
      expect(readyz.status).toBe(200);
      expect(readyz.body).toMatchObject({ result: 'success', status: 'ready' });
      const metrics = await request(adminUrl).get('/metrics');
      expect(metrics.status).toBe(200);
      expect(metrics.text).toContain('zulip_compat_shim_build_info');
      // Anything else on the admin listener: a 404, never the upstream.
      const other = await request(adminUrl).get('/api/v1/users/me').set('Host', 'chat.example.com');
      expect(other.status).toBe(404);
      expect(other.body).toEqual(NOT_FOUND);
      expect((await request(adminUrl).post('/healthz')).status).toBe(405);

      fake.seen = [];
      for (const path of OWN) {
        const res = await request(shim.url).get(path).set('Host', 'chat.example.com');
        expect(res.status, path).toBe(404);
        expect(res.body, path).toEqual(NOT_FOUND);
        expect(res.headers['x-request-id'], path).toMatch(/^[0-9a-f-]{36}$/);
      }
      expect(fake.seen.filter((s) => OWN.some((p) => s.url.startsWith(p)))).toEqual([]);
      // Everything else on the public port is as before.
      expect((await request(shim.url).get('/api/v1/server_settings').set('Host', 'chat.example.com')).status).toBe(200);
    } finally {
      await shim.close();
    }
    expect(shim.shim.adminServer?.listening).toBe(false);
  });

  it('closes with the public listener', async () => {
    const shim = await startShim(fake.url, { server: { adminListen: '127.0.0.1:0', shutdownGraceMs: 2000 } });
    const admin = (await shim.shim.listenAdmin())!;
    // A kept-alive connection to the admin listener does not hold the drain.
    const agentRes = await request(admin.url).get('/healthz').set('Connection', 'keep-alive');
    expect(agentRes.status).toBe(200);
    const started = Date.now();
    await shim.close();
    expect(Date.now() - started).toBeLessThan(1500);
    expect(shim.shim.server.listening).toBe(false);
    expect(shim.shim.adminServer!.listening).toBe(false);
  });

  it('without it, nothing changes: the own paths answer on the public port, there is no admin listener', async () => {
    const shim = await startShim(fake.url);
    try {
      expect(shim.shim.adminServer).toBeUndefined();
      expect(await shim.shim.listenAdmin()).toBeUndefined();
      expect((await request(shim.url).get('/healthz')).body).toMatchObject({ result: 'success', status: 'alive' });
      expect((await request(shim.url).get('/readyz').set('Host', 'chat.example.com')).status).toBe(200);
      expect((await request(shim.url).get('/metrics')).text).toContain('zulip_compat_shim_build_info');
    } finally {
      await shim.close();
    }
  });
});

describe('--admin-listen values', () => {
  it.each([
    ['127.0.0.1:9993', { host: '127.0.0.1', port: 9993 }],
    ['[::1]:9993', { host: '::1', port: 9993 }],
    ['localhost:0', { host: 'localhost', port: 0 }],
    ['0.0.0.0:9993', { host: '0.0.0.0', port: 9993 }],
  ])('%s is HOST:PORT', (text, want) => {
    expect(parseListenAddress(text)).toEqual(want);
    expect(loadConfig(['--demo', '--admin-listen', text], {}).config.server.adminListen).toBe(text);
  });

  it.each([
    ['nonsense', 'must be HOST:PORT, e.g. 127.0.0.1:9993 or [::1]:9993 (got "nonsense")'],
    ['9993', 'must be HOST:PORT, e.g. 127.0.0.1:9993 or [::1]:9993 (got "9993")'],
    [':9993', 'must be HOST:PORT, e.g. 127.0.0.1:9993 or [::1]:9993 (got ":9993")'],
    ['::1:9993', 'must be HOST:PORT, e.g. 127.0.0.1:9993 or [::1]:9993 (got "::1:9993")'],
    ['127.0.0.1:70000', 'the port must be 0 to 65535 (got 70000)'],
  ])('%s is a configuration error naming the key and its source', (text, message) => {
    expect(() => loadConfig(['--demo', '--admin-listen', text], {})).toThrow(ConfigError);
    expect(() => loadConfig(['--demo', '--admin-listen', text], {})).toThrow(`server.adminListen (--admin-listen): ${message}`);
    expect(() => loadConfig(['--demo'], { ADMIN_LISTEN: text })).toThrow(`server.adminListen (ADMIN_LISTEN): ${message}`);
  });
});

describe.concurrent('--admin-listen from the command line', { timeout: 60_000 }, () => {
  it('--admin-listen nonsense: exit 2, one line', async () => {
    const line = await oneErrorLine(runCli(['--demo', '--admin-listen', 'nonsense']));
    expect(line).toBe(
      'zulip-compat-shim: invalid configuration: server.adminListen (--admin-listen): must be HOST:PORT, e.g. 127.0.0.1:9993 or [::1]:9993 (got "nonsense")',
    );
  });

  it('an admin port in use: exit 2, one line naming server.adminListen', async () => {
    const taken = net.createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    const { port } = taken.address() as net.AddressInfo;
    try {
      const line = await oneErrorLine(runCli(['--upstream', fake.url, '--port', '0', '--admin-listen', `127.0.0.1:${port}`]));
      expect(line).toBe(
        `zulip-compat-shim: invalid configuration: server.adminListen (--admin-listen): port ${port} on 127.0.0.1 is already in use`,
      );
    } finally {
      await new Promise((r) => taken.close(r));
    }
  });

  it('serves the own paths on the admin port, says where in the start-up line, --healthcheck follows it, SIGTERM closes both', async () => {
    const adminPort = await systemPort();
    const run = runCli(['--upstream', fake.url, '--port', '0', '--log-level', 'info'], { env: { ADMIN_LISTEN: `127.0.0.1:${adminPort}` } });
    try {
      const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      expect(start).toMatchObject({ admin: `http://127.0.0.1:${adminPort}` });
      expect((await fetch(`http://127.0.0.1:${adminPort}/healthz`)).status).toBe(200);
      expect((await fetch(new URL('/healthz', String(start.listen)))).status).toBe(404);
      const publicPort = new URL(String(start.listen)).port;
      const health = runCli(['--healthcheck'], { env: { PORT: publicPort, HOST: '127.0.0.1', ADMIN_LISTEN: `127.0.0.1:${adminPort}` } });
      expect(await health.exited).toBe(0);
      run.child.kill('SIGTERM');
      expect(await run.exited).toBe(0);
      await expect(fetch(`http://127.0.0.1:${adminPort}/healthz`)).rejects.toThrow();
    } finally {
      run.child.kill('SIGKILL');
    }
  });
});
