import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { featureLevelOrUnknown, loggableUrl } from '../src/observability/startup.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';

const ROOT = resolve(import.meta.dirname, '..');
const PACKAGE_VERSION = (JSON.parse(readFileSync(resolve(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

/** The environment without any shim setting, so the machine's own (REDIS_URL in CI, …) cannot leak in. */
function cleanEnv(): NodeJS.ProcessEnv {
  const settings = /^(UPSTREAM_URL|REPLAY_HAR|RECORD_HAR|PORT|HOST|CONFIG_FILE|REDIS_URL|PRESENCE_.*|LOG_LEVEL|UPSTREAM_.*|REPLAY_STRICT)$/;
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !settings.test(k)));
}

interface Run {
  child: ChildProcess;
  stdout: string[];
  stderr: string[];
  exited: Promise<number | null>;
}

function cli(args: string[]): Run {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', ...args], { cwd: ROOT, env: cleanEnv() });
  const stdout: string[] = [];
  const stderr: string[] = [];
  let out = '';
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString();
    const lines = out.split('\n');
    out = lines.pop()!;
    stdout.push(...lines);
  });
  child.stderr.on('data', (d: Buffer) => stderr.push(d.toString()));
  const exited = new Promise<number | null>((r) =>
    child.on('close', (code) => {
      if (out) stdout.push(out);
      r(code);
    }),
  );
  return { child, stdout, stderr, exited };
}

async function until<T>(what: string, f: () => T | undefined, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

function logLine(run: Run, msg: string): Record<string, unknown> | undefined {
  for (const line of run.stdout) {
    try {
      const o = JSON.parse(line) as Record<string, unknown>;
      if (o.msg === msg) return o;
    } catch {
      // not a log line
    }
  }
  return undefined;
}

describe.concurrent('zulip-compat-shim CLI', () => {
  it('--version prints the package version', async () => {
    const run = cli(['--version']);
    expect(await run.exited).toBe(0);
    expect(run.stdout.join('\n').trim()).toBe(PACKAGE_VERSION);
  });

  it.each([
    [['--port', 'abc'], /server\.port.*--port/],
    [['--upstream', 'ftp://x'], /upstream\.url.*--upstream/],
    [['--upstream', 'http://a', '--replay', 'b.har'], /replay\.har.*--replay/],
  ])('%j exits with code 2 and one line naming the key', async (args, key) => {
    const run = cli(args);
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
    const run = cli(['--upstream', fake.url, '--port', '0', '--log-level', 'info']);
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
    const run = cli(['--upstream', 'http://127.0.0.1:1', '--port', '0', '--log-level', 'info']);
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
