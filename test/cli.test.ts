import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SETTINGS, usage } from '../src/config/index.js';
import { featureLevelOrUnknown, loggableUrl } from '../src/observability/startup.js';
import { logLine, oneErrorLine, ROOT, runCli, until } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { systemPort } from './support/ports.js';
import { startShim } from './support/shim.js';

const PACKAGE_VERSION = (JSON.parse(readFileSync(resolve(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

/** Each test starts the CLI as a child process: seconds apiece on a busy machine, so a longer limit. */
const CLI_TIMEOUT = { timeout: 60_000 };

describe.concurrent('zulip-compat-shim CLI', CLI_TIMEOUT, () => {
  it.each([['-v'], ['--version']])('%s prints the package version', async (flag) => {
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

describe.concurrent('start-up mistakes: exit 2, one line naming the key and its real source', CLI_TIMEOUT, () => {
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
    expect(line).toMatch(/UPSTREAM is set, but the variable is UPSTREAM_URL/);
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

describe.concurrent('the removed --workers: exit 2, one line saying what to run instead, however it is given', CLI_TIMEOUT, () => {
  const instead =
    'removed: the shim runs as one process; to use more cores, run several replicas on one Redis, each on its own port, behind your load balancer (docs/deployment.md, "Several replicas on one host")';

  it.each([
    [['--demo', '--workers', '2'], {}, '--workers'],
    [['--demo', '--workers=auto'], {}, '--workers'],
    [['--demo'], { WORKERS: '2' }, 'WORKERS'],
  ])('%j with %j', async (args, env, source) => {
    expect(await oneErrorLine(runCli(args, { env }))).toBe(
      `zulip-compat-shim: invalid configuration: server.workers (${source}): ${instead}`,
    );
  });

  it('server.workers in a config file', async () => {
    const file = configFile('{"server":{"workers":2,"port":0}}');
    expect(await oneErrorLine(runCli(['--config', file, '--demo']))).toBe(
      `zulip-compat-shim: invalid configuration: server.workers (config file ${file}): ${instead}`,
    );
  });

  it('--check says the same and exits 2', async () => {
    expect(await oneErrorLine(runCli(['--check', '--demo', '--workers', '1']))).toBe(
      `zulip-compat-shim: invalid configuration: server.workers (--workers): ${instead}`,
    );
  });
});

describe.concurrent('--record never destroys a recording', CLI_TIMEOUT, () => {
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

describe.concurrent('start-up line and signals', CLI_TIMEOUT, () => {
  let fake: FakeZulip;
  beforeAll(async () => {
    fake = await startFake({ era: '5.0' });
  });
  afterAll(async () => {
    await fake.stop();
  });

  /** True once the fake upstream has received a request for exactly this target. */
  const reached = (target: string) => (fake.seen.some((r) => r.url === target) ? true : undefined);

  /** A GET through the shim, resolved with its status and body, or the socket error it met. */
  const request = (listen: URL, path: string) =>
    new Promise<{ status: number; body: string } | { error: string }>((resolve) => {
      http
        .get({ host: listen.hostname, port: listen.port, path, agent: new http.Agent({ keepAlive: true }) }, (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          res.on('error', (e: NodeJS.ErrnoException) => resolve({ error: e.code ?? e.message }));
        })
        .on('error', (e: NodeJS.ErrnoException) => resolve({ error: e.code ?? e.message }));
    });

  it('logs version, upstream, feature level, store and address', async () => {
    const run = runCli(['--upstream', fake.url, '--port', '0', '--log-level', 'info']);
    try {
      const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      expect(start).toMatchObject({ version: PACKAGE_VERSION, upstream: fake.url, featureLevel: 122, store: 'memory' });
    } finally {
      run.child.kill('SIGKILL');
    }
  });

  it.each([['SIGTERM'], ['SIGINT']] as const)(
    '%s drains: no new connections, the in-flight request finishes, exit 0 (X9)',
    async (signal) => {
      const run = runCli(['--upstream', fake.url, '--port', '0', '--log-level', 'info']);
      try {
        const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
        const listen = new URL(String(start.listen));
        const path = `/test/slow?ms=700&signal=${signal}`;
        const answer = request(listen, path);
        await until('the request to reach the upstream', () => reached(path));
        run.child.kill(signal);
        await until('shutting down', () => logLine(run, 'shutting down'));
        const late = await request(listen, '/api/v1/server_settings');
        expect(late).toMatchObject({ error: 'ECONNREFUSED' });

        const res = await answer;
        expect(res).toMatchObject({ status: 200 });
        expect(JSON.parse((res as { body: string }).body)).toMatchObject({ slow: true });
        expect(await run.exited).toBe(0);
        expect(logLine(run, 'shutting down')).toMatchObject({ signal });
      } finally {
        run.child.kill('SIGKILL');
      }
    },
  );

  it('SIGHUP reloads the configuration: the in-flight request finishes, new settings apply, others wait for a restart (X9)', async () => {
    const KEPT = 'reload (SIGHUP): these settings change only with a restart; kept as they were';
    const dir = mkdtempSync(join(tmpdir(), 'zcs-reload-'));
    const file = join(dir, 'shim.json');
    writeFileSync(file, JSON.stringify({ server: { realmHosts: [] }, log: { level: 'info' } }));
    const run = runCli(['--upstream', fake.url, '--port', '0', '--config', file]);
    try {
      const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      const listen = new URL(String(start.listen));
      const path = '/test/slow?ms=700&signal=SIGHUP';
      const answer = request(listen, path);
      await until('the request to reach the upstream', () => reached(path));
      writeFileSync(file, JSON.stringify({ server: { realmHosts: ['only.example.com'], port: 1 }, log: { level: 'info' } }));
      run.child.kill('SIGHUP');
      const applied = await until('the reload', () => logLine(run, 'reload (SIGHUP): settings applied'));
      expect(applied).toMatchObject({ applied: ['server.realmHosts'] });
      // --port on the command line wins over the file: nothing to restart for.
      expect(logLine(run, KEPT)).toBeUndefined();
      expect(await answer).toMatchObject({ status: 200 });
      // The new realm hosts apply to the next request; the shim keeps serving.
      const refused = await request(listen, '/api/v1/server_settings');
      expect(refused).toMatchObject({ status: 400 });
      // A setting that cannot change while serving is named and kept.
      writeFileSync(file, JSON.stringify({ server: { realmHosts: [] }, presence: { coalesceMs: 1 }, log: { level: 'info' } }));
      run.child.kill('SIGHUP');
      const kept = await until('the second reload', () => logLine(run, KEPT));
      expect(kept).toMatchObject({ keys: ['presence.coalesceMs'] });
      expect(await request(listen, '/api/v1/server_settings')).toMatchObject({ status: 200 });
      expect(run.child.exitCode).toBeNull();
    } finally {
      run.child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });

  /**
   * Resolves once the child process catches SIGHUP (Linux: its bit in /proc/PID/status SigCgt;
   * node itself catches none until a listener is added, unlike SIGTERM, which it catches to
   * restore the terminal): the first moment the shim takes its signals.
   */
  const catchesSighup = (pid: number) =>
    until(
      `pid ${pid} to catch SIGHUP`,
      () => {
        const mask = /^SigCgt:\s*([0-9a-f]+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
        return mask && BigInt(`0x${mask}`) & 1n ? true : undefined;
      },
      10_000,
    );

  it.each(['SIGHUP', 'SIGTERM'] as const)(
    'a %s at the first moment the shim takes signals, before it is up, is held and acted on; it never ends the process by itself (X9)',
    async (signal) => {
      const port = await systemPort();
      const run = runCli(['--upstream', fake.url, '--port', String(port), '--log-level', 'info']);
      try {
        await catchesSighup(run.child.pid!);
        // Not listening yet: the signal comes while the shim is still starting.
        const refused = await new Promise<string>((done) =>
          net
            .connect(port, '127.0.0.1', function (this: net.Socket) {
              this.destroy();
              done('connected');
            })
            .on('error', (e: NodeJS.ErrnoException) => done(e.code ?? e.message)),
        );
        run.child.kill(signal);
        expect(refused).toBe('ECONNREFUSED');
        if (signal === 'SIGHUP') {
          const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
          await until('the reload', () => logLine(run, /^reload \(SIGHUP\)/));
          expect(run.child.signalCode).toBeNull();
          expect(await request(new URL(String(start.listen)), '/healthz')).toMatchObject({ status: 200 });
          run.child.kill('SIGTERM');
        }
        expect(await run.exited).toBe(0);
        expect(run.child.signalCode).toBeNull();
        expect(logLine(run, 'shutting down')).toMatchObject({ signal: 'SIGTERM' });
      } finally {
        run.child.kill('SIGKILL');
      }
    },
  );

  it('--check says what it found of the configuration, the upstream and the store: 0 when all answer, 2 when not', async () => {
    const good = runCli(['--check', '--upstream', fake.url]);
    expect(await good.exited).toBe(0);
    const goodOut = good.stdout.join('');
    expect(goodOut).toContain('zulip-compat-shim: check: configuration: valid');
    expect(goodOut).toMatch(/check: upstream http:\/\/127\.0\.0\.1:\d+: Zulip 5\.0, feature level 122, realm https:\/\//);
    expect(goodOut).toContain('check: store: in this process');
    const bad = runCli(['--check', '--upstream', 'http://127.0.0.1:1', '--redis', 'redis://127.0.0.1:1']);
    expect(await bad.exited).toBe(2);
    const badOut = bad.stdout.join('');
    expect(badOut).toMatch(/check: upstream http:\/\/127\.0\.0\.1:1: does not answer/);
    expect(badOut).toMatch(/check: store: Redis does not answer/);
    const invalid = runCli(['--check', '--upstream', fake.url, '--port', 'abc']);
    expect(await invalid.exited).toBe(2);
    expect(invalid.stderr.join('')).toMatch(/invalid configuration: server\.port/);
  });

  it('--healthcheck asks /healthz of the shim its configuration describes: 0 when it answers, 1 when not', async () => {
    const shim = await startShim(fake.url);
    const port = new URL(shim.url).port;
    const closed = net.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const closedPort = String((closed.address() as net.AddressInfo).port);
    await new Promise((r) => closed.close(r));
    try {
      const up = runCli(['--healthcheck'], { env: { PORT: port, HOST: '127.0.0.1' } });
      const down = runCli(['--healthcheck'], { env: { PORT: closedPort } });
      expect(await up.exited).toBe(0);
      expect(await down.exited).toBe(1);
      expect(down.stderr.join('')).toMatch(/healthcheck: http:\/\/127\.0\.0\.1:\d+\/healthz: .*ECONNREFUSED/);
    } finally {
      await shim.close();
    }
  });

  it('a held long poll gets a Zulip-shaped 503 at the drain deadline (--shutdown-grace-ms), not a reset', async () => {
    const run = runCli(['--upstream', fake.url, '--port', '0', '--log-level', 'info', '--shutdown-grace-ms', '300']);
    try {
      const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      const listen = new URL(String(start.listen));
      const path = '/test/slow?ms=60000&held=1';
      const answer = request(listen, path);
      await until('the request to reach the upstream', () => reached(path));
      run.child.kill('SIGTERM');
      const res = await answer;
      expect(res).toMatchObject({ status: 503 });
      expect(JSON.parse((res as { body: string }).body)).toMatchObject({ result: 'error', code: 'UPSTREAM_UNAVAILABLE' });
      expect(await run.exited).toBe(0);
    } finally {
      run.child.kill('SIGKILL');
    }
  });

  it('warns once about a variable one edit from a setting: PROT=1234 (did you mean PORT?)', async () => {
    const run = runCli(['--upstream', fake.url, '--port', '0', '--log-level', 'info'], { env: { PROT: '1234' } });
    try {
      await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      const warning = logLine(run, /^environment: PROT /);
      expect(warning).toMatchObject({ level: 40, variable: 'PROT', meant: 'PORT', msg: expect.stringContaining('did you mean PORT?') });
      expect(run.stdout.filter((l) => l.includes('environment: PROT '))).toHaveLength(1);
    } finally {
      run.child.kill('SIGKILL');
    }
  });

  it('warns, once listening, of each thing --check would fail on, and serves anyway', async () => {
    const run = runCli(['--upstream', 'http://127.0.0.1:1', '--redis', 'redis://127.0.0.1:1', '--port', '0', '--log-level', 'info']);
    try {
      const start = await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      const upstream = await until('the upstream warning', () => logLine(run, /^start-up check: upstream /));
      expect(upstream).toMatchObject({
        level: 40,
        msg: expect.stringMatching(/^start-up check: upstream http:\/\/127\.0\.0\.1:1: does not answer \(.+\); serving anyway$/),
      });
      const store = await until('the store warning', () => logLine(run, /^start-up check: store: /));
      expect(store).toMatchObject({ level: 40, msg: 'start-up check: store: Redis does not answer (unreachable); serving anyway' });
      const health = await fetch(new URL('/healthz', String(start.listen)));
      expect(health.status).toBe(200);
      expect(run.stdout.filter((l) => l.includes('start-up check:'))).toHaveLength(2);
    } finally {
      run.child.kill('SIGKILL');
    }
  });

  it('says nothing of the start-up checks when the upstream and the store answer', async () => {
    const run = runCli(['--upstream', fake.url, '--port', '0', '--log-level', 'info']);
    try {
      await until('the start-up line', () => logLine(run, 'zulip-compat-shim listening'));
      // The probes ask a local upstream and the process's own store: well done within a second.
      await new Promise((r) => setTimeout(r, 1000));
      expect(logLine(run, /^start-up check/)).toBeUndefined();
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

describe('--app-feature-level (M1)', () => {
  it('refuses to start (exit 2, one line) in front of a server it cannot serve the app at', async () => {
    const old = await startFake({ era: '4.0' });
    try {
      const run = runCli(['--upstream', old.url, '--port', '0', '--log-level', 'warn', '--app-feature-level', '277']);
      const line = await oneErrorLine(run);
      expect(line).toMatch(
        /^zulip-compat-shim: app: --app-feature-level 277 cannot be served by a server at feature level \d+ \(Zulip 5\.0, feature level 122, or later is needed\)$/,
      );
    } finally {
      await old.stop();
    }
  });
});

describe('--help', () => {
  it('lists every setting once, with its variable and nothing that is no option (--check twice: alone and =config)', () => {
    const options = [...SETTINGS.map((s) => s.flag), 'config', 'healthcheck', 'check', 'check', 'version', 'help'];
    const text = usage();
    const listed = [...text.matchAll(/^ {2}(?:-[a-z], )?--([a-z-]+)/gm)].map((m) => m[1]);
    expect(listed.sort()).toEqual(options.sort());
    for (const s of SETTINGS) expect(text.match(new RegExp(` --${s.flag}\\b.*\\[${s.env}\\]$`, 'gm')), s.flag).toHaveLength(1);
    expect(text).toContain('  --port N                  listen port (default 9991)                    [PORT]\n');
  });

  it('says what it said: the whole text as test/fixtures/help.txt holds it (a change to it is a change to this file)', () => {
    expect(usage()).toBe(readFileSync(join(ROOT, 'test/fixtures/help.txt'), 'utf8'));
  });
});
