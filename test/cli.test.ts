import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { featureLevelOrUnknown, loggableUrl } from '../src/observability/startup.js';
import { logLine, oneErrorLine, ROOT, runCli, until } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';

const PACKAGE_VERSION = (JSON.parse(readFileSync(resolve(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

describe.concurrent('zulip-compat-shim CLI', () => {
  it('--version prints the package version', async () => {
    const run = runCli(['--version']);
    expect(await run.exited).toBe(0);
    expect(run.stdout.join('\n').trim()).toBe(PACKAGE_VERSION);
  });

  it.each([['-v'], ['--version']])('%s prints the version', async (flag) => {
    const run = runCli([flag]);
    expect(await run.exited).toBe(0);
    expect(run.stdout.join('\n').trim()).toBe(PACKAGE_VERSION);
  });

  it.each([['-h'], ['--help']])('%s prints the usage, also beside a bad setting', async (flag) => {
    const run = runCli([flag], { env: { PORT: 'abc' } });
    expect(await run.exited).toBe(0);
    expect(run.stdout.join('\n')).toMatch(/^Usage: zulip-compat-shim[\s\S]*--demo[\s\S]*-h, --help/);
  });

  it.each([
    [['--port', 'abc'], /server\.port.*--port/],
    [['--demo', '--port', '-1'], /^zulip-compat-shim: invalid configuration: server\.port \(--port\): must be a port number, 0 to 65535$/],
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

/** A config file with this text, in a directory of its own. */
function configFile(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'zcs-cli-'));
  const file = join(dir, 'shim.json');
  writeFileSync(file, text);
  return file;
}

describe.concurrent('start-up mistakes: exit 2, one line naming the key and its real source (15.1, 15.2, 15.7)', () => {
  it('a misspelt key in a config file: {"server":{"prot":19999}}', async () => {
    const file = configFile('{"server":{"prot":19999}}');
    const line = await oneErrorLine(runCli(['--config', file, '--demo']));
    expect(line).toBe(
      `zulip-compat-shim: invalid configuration: server.prot (config file ${file}): unknown key (did you mean server.port?)`,
    );
  });

  it('a misspelt key that would have left the upstream out: {"upstream":{"URL":"…"}}', async () => {
    const file = configFile('{"upstream":{"URL":"http://127.0.0.1:9"}}');
    expect(await oneErrorLine(runCli(['--config', file]))).toMatch(
      /upstream\.URL \(config file .*\): unknown key \(did you mean upstream\.url\?\)$/,
    );
  });

  it('no upstream, no replay, no demo: names --upstream and --demo', async () => {
    const line = await oneErrorLine(runCli([], { env: { UPSTREAM: 'http://127.0.0.1:9' } }));
    expect(line).toMatch(/--upstream/);
    expect(line).toMatch(/--demo/);
  });

  it('--demo beside --upstream', async () => {
    expect(await oneErrorLine(runCli(['--demo', '--upstream', 'http://127.0.0.1:9']))).toMatch(/one of --upstream, --replay or --demo/);
  });

  it('PORT=abc is no error when --port overrides it', async () => {
    const run = runCli(['--demo', '--port', '0', '--log-level', 'info'], { env: { PORT: 'abc' } });
    try {
      await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
    } finally {
      run.child.kill('SIGTERM');
    }
    expect(await run.exited).toBe(0);
  });

  it('PORT=70000 is blamed on PORT', async () => {
    expect(await oneErrorLine(runCli(['--demo'], { env: { PORT: '70000' } }))).toMatch(/server\.port \(PORT\): must be a port number/);
  });

  it('PORT=abc without --port is blamed on PORT', async () => {
    expect(await oneErrorLine(runCli(['--demo'], { env: { PORT: 'abc' } }))).toMatch(/server\.port \(PORT\): expected a whole number/);
  });

  it("a string port in the config file is blamed on the file's key", async () => {
    const file = configFile('{"server":{"port":"9000"}}');
    expect(await oneErrorLine(runCli(['--config', file, '--demo']))).toMatch(
      new RegExp(`server\\.port \\(config file ${file.replace(/[.]/g, '\\.')}\\): .*expected number`),
    );
  });

  it('a port in use', async () => {
    const taken = net.createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    const { port } = taken.address() as net.AddressInfo;
    try {
      const line = await oneErrorLine(runCli(['--demo', '--port', String(port)]));
      expect(line).toBe(`zulip-compat-shim: invalid configuration: server.port (--port): port ${port} on 127.0.0.1 is already in use`);
    } finally {
      taken.close();
    }
  });

  it.each([['nohost.invalid'], ['192.0.2.1']])('a --host this machine cannot listen on: %s', async (host) => {
    expect(await oneErrorLine(runCli(['--demo', '--port', '0'], { env: { HOST: host } }))).toMatch(
      new RegExp(`^zulip-compat-shim: invalid configuration: server\\.host \\(HOST\\): ${host.replace(/[.]/g, '\\.')} is not`),
    );
  });

  it('a replay file that is not JSON: one line', async () => {
    const file = configFile('not json {\n}\n');
    expect(await oneErrorLine(runCli(['--replay', file]))).toMatch(/replay\.har .* is not a HAR file/);
  });

  it("a relative replay path in a config file is the file's own, not the working directory's", async () => {
    const file = configFile('{"replay":{"har":"missing-beside-the-config.har"}}');
    const line = await oneErrorLine(runCli(['--config', file]));
    expect(line).toContain(join(file, '..', 'missing-beside-the-config.har'));
  });
});

describe('--record never destroys a recording (15.3)', () => {
  let fake: FakeZulip;
  beforeAll(async () => {
    fake = await startFake({ era: '5.0' });
  });
  afterAll(async () => {
    await fake.stop();
  });

  /** An 84 KB recording (the bundled demo's) in a directory of its own. */
  function existingRecording(): { dir: string; file: string; bytes: Buffer } {
    const dir = mkdtempSync(join(tmpdir(), 'zcs-record-'));
    const file = join(dir, 'session.har');
    const bytes = readFileSync(resolve(ROOT, 'examples', 'demo-zulip-2.1.har'));
    expect(bytes.length).toBeGreaterThan(84_000);
    writeFileSync(file, bytes);
    return { dir, file, bytes };
  }

  /** The files of `dir` holding exactly `bytes`. */
  const holding = (dir: string, bytes: Buffer) => readdirSync(dir).filter((f) => readFileSync(join(dir, f)).equals(bytes));

  it('moves the existing file aside, also when start-up then fails', async () => {
    const { dir, file, bytes } = existingRecording();
    const taken = net.createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    try {
      const port = String((taken.address() as net.AddressInfo).port);
      expect(await oneErrorLine(runCli(['--upstream', fake.url, '--record', file, '--port', port]))).toMatch(/already in use/);
    } finally {
      taken.close();
    }
    expect(holding(dir, bytes)).toEqual([expect.stringMatching(/^session\.\d{4}-\d\d-\d\dT[\d-]+Z\.har$/)]);
  });

  it('moves the existing file aside and records into a fresh one', async () => {
    const { dir, file, bytes } = existingRecording();
    const run = runCli(['--upstream', fake.url, '--record', file, '--port', '0', '--log-level', 'info']);
    try {
      const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      expect(logLine(run, /moved aside/)).toMatchObject({ file });
      expect((await fetch(new URL('/api/v1/server_settings', String(start.listen)))).status).toBe(200);
      run.child.kill('SIGTERM');
      expect(await run.exited).toBe(0);
    } finally {
      run.child.kill('SIGKILL');
    }
    expect(holding(dir, bytes)).toHaveLength(1);
    expect(readdirSync(dir)).toHaveLength(2);
    expect(readFileSync(file, 'utf8')).toContain('/api/v1/server_settings');
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
