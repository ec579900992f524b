import { readFileSync } from 'node:fs';
import http from 'node:http';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { featureLevelOrUnknown, loggableUrl } from '../src/observability/startup.js';
import { logLine, ROOT, runCli, until } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';

const PACKAGE_VERSION = (JSON.parse(readFileSync(resolve(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

describe.concurrent('zulip-compat-shim CLI', () => {
  it('--version prints the package version', async () => {
    const run = runCli(['--version']);
    expect(await run.exited).toBe(0);
    expect(run.stdout.join('\n').trim()).toBe(PACKAGE_VERSION);
  });

  it.each([
    [['--port', 'abc'], /server\.port.*--port/],
    [['--upstream', 'ftp://x'], /upstream\.url.*--upstream/],
    [['--upstream', 'http://a', '--replay', 'b.har'], /replay\.har.*--replay/],
  ])('%j exits with code 2 and one line naming the key', async (args, key) => {
    const run = runCli(args);
    expect(await run.exited).toBe(2);
    const lines = run.stderr.join('').trimEnd().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(key);
    expect(run.stdout).toEqual([]);
  });
});

describe('start-up line and SIGTERM', () => {
  let fake: FakeZulip;
  beforeAll(async () => {
    fake = await startFake({ era: '5.0' });
  });
  afterAll(async () => {
    await fake.stop();
  });

  it('logs version, upstream, feature level, store and address; lets an in-flight request finish on SIGTERM; exits 0', async () => {
    const run = runCli(['--upstream', fake.url, '--port', '0', '--log-level', 'info']);
    try {
      const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      expect(start).toMatchObject({ version: PACKAGE_VERSION, upstream: fake.url, featureLevel: 122, store: 'memory' });
      const listen = new URL(String(start.listen));

      const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
        const agent = new http.Agent({ keepAlive: true });
        http
          .get({ host: listen.hostname, port: listen.port, path: '/test/slow?ms=700', agent }, (res) => {
            let body = '';
            res.on('data', (d: Buffer) => (body += d.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
            res.on('error', reject);
          })
          .on('error', reject);
      });
      await until('the request to reach the upstream', () => (fake.stats.requests.get('GET /test/slow') ? true : undefined));
      run.child.kill('SIGTERM');

      const res = await answer;
      expect(res.status).toBe(200);
      expect(JSON.parse(res.body)).toMatchObject({ slow: true });
      expect(await run.exited).toBe(0);
      expect(logLine(run, 'shutting down')).toMatchObject({ signal: 'SIGTERM' });
    } finally {
      run.child.kill('SIGKILL');
    }
  });

  it('says "unknown" when the upstream does not answer, and starts anyway', async () => {
    const run = runCli(['--upstream', 'http://127.0.0.1:1', '--port', '0', '--log-level', 'info']);
    try {
      const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      expect(start).toMatchObject({ featureLevel: 'unknown', upstream: 'http://127.0.0.1:1' });
      const health = await fetch(new URL('/healthz', String(start.listen)));
      expect(health.status).toBe(200);
      run.child.kill('SIGTERM');
      expect(await run.exited).toBe(0);
    } finally {
      run.child.kill('SIGKILL');
    }
  });
});

describe('start-up helpers', () => {
  it('featureLevelOrUnknown: the answer, or "unknown" on failure or after the wait', async () => {
    expect(await featureLevelOrUnknown(async () => 237, 1000)).toBe(237);
    expect(await featureLevelOrUnknown(() => Promise.reject(new Error('down')), 1000)).toBe('unknown');
    expect(await featureLevelOrUnknown(() => new Promise<number>(() => {}), 10)).toBe('unknown');
  });

  it.each([
    ['https://chat.example.com', 'https://chat.example.com'],
    ['https://chat.example.com/', 'https://chat.example.com/'],
    ['https://u:p@chat.example.com', 'https://***:***@chat.example.com'],
    ['https://u@chat.example.com:8443/zulip', 'https://***@chat.example.com:8443/zulip'],
    ['replay:demo.har', 'replay:demo.har'],
  ])('loggableUrl(%s) = %s', (url, shown) => {
    expect(loggableUrl(url)).toBe(shown);
  });
});
