import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { restartDelayMs } from '../src/cluster.js';
import { logLine, oneErrorLine, runCli, until, type CliRun } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { parsePrometheusText, sampleValue } from './support/prometheus-text.js';
import { adminRedis, deleteKeysUnder, describeRedis, REDIS_URL, testKeyPrefix } from './support/redis.js';

/**
 * `--workers N`: a node:cluster primary and N workers sharing the port, each a full shim,
 * replicas of one another through Redis (S1).
 */

const CLI_TIMEOUT = { timeout: 90_000 };
const P = 'zulip_compat_shim_';

/** One request on a connection of its own (so node:cluster hands each to the next worker). */
function send(
  listen: URL,
  path: string,
  o: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; body: string } | { error: string }> {
  return new Promise((resolve) => {
    const req = http.request(
      { host: listen.hostname, port: listen.port, path, method: o.method ?? 'GET', headers: o.headers, agent: false },
      (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', (e: NodeJS.ErrnoException) => resolve({ error: e.code ?? e.message }));
      },
    );
    req.on('error', (e: NodeJS.ErrnoException) => resolve({ error: e.code ?? e.message }));
    req.end(o.body);
  });
}

/** Start-up lines so far: one per worker that started. */
const listening = (run: CliRun) => run.stdout.filter((l) => l.includes('"msg":"zulip-compat-shim listening"')).length;

function ok(r: { status: number; body: string } | { error: string }): string {
  if ('error' in r) throw new Error(`request failed: ${r.error}`);
  expect(r.status).toBe(200);
  return r.body;
}

describe.concurrent('--workers: refused where replicas cannot hold the rules (exit 2, one line)', CLI_TIMEOUT, () => {
  it.each([
    [
      ['--upstream', 'http://127.0.0.1:1', '--workers', '2'],
      'more than one worker needs a shared store, where the workers keep the presence state they all answer from: give --redis, --redis-sentinels or --redis-cluster',
    ],
    [
      ['--demo', '--workers', '2', '--redis', 'redis://127.0.0.1:1'],
      'more than one worker cannot run with --demo (one process records or replays)',
    ],
    [
      ['--upstream', 'http://127.0.0.1:1', '--record', '/tmp/never.har', '--workers', '3', '--redis', 'redis://127.0.0.1:1'],
      'more than one worker cannot run with --record (one process records or replays)',
    ],
    [['--upstream', 'http://127.0.0.1:1', '--workers', '0'], 'must be 1 or more, or auto'],
    [['--upstream', 'http://127.0.0.1:1', '--workers', 'many'], 'must be a number of processes, or auto'],
  ])('%j', async (args, message) => {
    const line = await oneErrorLine(runCli(args));
    expect(line).toBe(`zulip-compat-shim: invalid configuration: server.workers (--workers): ${message}`);
  });

  // One CPU makes auto a single process: nothing to refuse.
  it.skipIf(availableParallelism() < 2)('WORKERS=auto without a store names the environment variable', async () => {
    const line = await oneErrorLine(runCli(['--upstream', 'http://127.0.0.1:1'], { env: { WORKERS: 'auto' } }));
    expect(line).toMatch(
      /^zulip-compat-shim: invalid configuration: server\.workers \(WORKERS\): more than one worker needs a shared store/,
    );
  });
});

describe('restarting a worker that died', () => {
  it('waits longer after each death within a minute, up to 30 s', () => {
    expect([1, 2, 3, 4, 8, 20].map(restartDelayMs)).toEqual([250, 500, 1000, 2000, 30_000, 30_000]);
  });
});

describeRedis('--workers 2 --redis in front of the fake upstream', () => {
  const prefix = testKeyPrefix();
  // The store's key prefix is a config-file key: this test's own keeps its keys apart.
  const prefixFile = join(mkdtempSync(join(tmpdir(), 'zcs-cluster-')), 'shim.json');
  writeFileSync(prefixFile, JSON.stringify({ store: { keyPrefix: prefix } }));
  let fake: FakeZulip;
  /** Client ports of the upstream connections the shim opened, by path. */
  const upstreamSockets = new Map<string, Set<number>>();
  beforeAll(async () => {
    fake = await startFake({ era: '5.0' });
    fake.override = (req) => {
      const path = (req.url ?? '').split('?')[0]!;
      const set = upstreamSockets.get(path) ?? new Set<number>();
      set.add(req.socket.remotePort ?? 0);
      upstreamSockets.set(path, set);
      return false;
    };
  });
  afterAll(async () => {
    await fake.stop();
    const redis = adminRedis();
    await deleteKeysUnder(redis, prefix);
    redis.disconnect();
  });

  it(
    'both workers answer, /metrics counts them all, presence holds P5/P6/P9 across them, a dead worker is replaced, SIGTERM drains (X9)',
    CLI_TIMEOUT,
    async () => {
      const coalesceMs = 5_000;
      const run = runCli([
        ...['--upstream', fake.url, '--port', '0', '--workers', '2', '--redis', REDIS_URL, '--config', prefixFile],
        ...['--coalesce-ms', String(coalesceMs), '--log-level', 'info'],
      ]);
      try {
        await until('two workers listening', () => (listening(run) >= 2 ? true : undefined));
        const listen = new URL(String(logLine(run, 'zulip-compat-shim listening')!.listen));
        let sent = 0;

        // Sequential requests on fresh connections: one process would reuse one upstream connection.
        for (let i = 0; i < 8; i++) {
          expect(JSON.parse(ok(await send(listen, '/test/echo?i=1')))).toMatchObject({ method: 'GET' });
          sent++;
        }
        expect(upstreamSockets.get('/test/echo')!.size).toBeGreaterThanOrEqual(2);

        // Presence from every user, each poll on a fresh connection (so alternating workers).
        for (const u of fake.humans()) fake.report(u.user_id, 'active');
        fake.resetStats();
        const started = Date.now();
        const ids = new Map<number, number>(fake.humans().map((u) => [u.user_id, -1]));
        for (let step = 0; step < 24; step++) {
          const user = fake.humans()[step % fake.humans().length]!.user_id;
          if (step % 5 === 4) {
            fake.advance(60);
            fake.report(user, step % 2 ? 'idle' : 'active');
          }
          const body = ok(
            await send(listen, '/api/v1/users/me/presence', {
              method: 'POST',
              headers: { authorization: fake.auth(user), 'content-type': 'application/x-www-form-urlencoded', host: 'chat.example.com' },
              body: `status=active&last_update_id=${ids.get(user)}`,
            }),
          );
          sent++;
          const answer = JSON.parse(body) as { presence_last_update_id: number };
          expect(answer.presence_last_update_id).toBeGreaterThanOrEqual(ids.get(user)!); // P5: never backwards
          ids.set(user, answer.presence_last_update_id);
        }
        // P9: at most one full upstream fetch per window, whichever worker asked.
        const windows = Math.floor((Date.now() - started) / coalesceMs) + 1;
        expect(fake.stats.presenceFull).toBeGreaterThanOrEqual(1);
        expect(fake.stats.presenceFull).toBeLessThanOrEqual(windows);

        // One scrape reaches one worker and reports every worker's requests.
        const metrics = parsePrometheusText(ok(await send(listen, '/metrics')));
        expect(metrics.errors).toEqual([]);
        const total = metrics.samples.filter((s) => s.name === `${P}requests_total`).reduce((a, s) => a + s.value, 0);
        expect(total).toBe(sent);
        expect(sampleValue(metrics, `${P}build_info`, {})).toBe(1);

        // A worker that dies is logged and replaced; the port keeps being served meanwhile.
        const workers = readFileSync(`/proc/${run.child.pid}/task/${run.child.pid}/children`, 'utf8').trim().split(/\s+/).map(Number);
        expect(workers).toHaveLength(2);
        process.kill(workers[0]!, 'SIGKILL');
        expect(await until('the death logged', () => logLine(run, 'worker exited unexpectedly: replacing it'))).toMatchObject({
          pid: workers[0],
          signal: 'SIGKILL',
        });
        // A scrape while the replacement starts: answered by the workers that are ready, not held.
        expect(parsePrometheusText(ok(await send(listen, '/metrics'))).errors).toEqual([]);
        await until('a replacement listening', () => (listening(run) >= 3 ? true : undefined));
        for (let i = 0; i < 2; i++) {
          ok(await send(listen, '/test/echo?after=replacement'));
          sent++;
        }

        // SIGTERM to the primary: the in-flight request finishes, then everything exits 0.
        const path = '/test/slow?ms=700&cluster=1';
        const answer = send(listen, path);
        await until('the request to reach the upstream', () => (fake.seen.some((r) => r.url === path) ? true : undefined));
        run.child.kill('SIGTERM');
        expect(ok(await answer)).toMatch(/"slow":true/);
        expect(await run.exited).toBe(0);
        expect(run.stdout.filter((l) => l.includes('"msg":"shutting down"'))).toHaveLength(2);
      } finally {
        run.child.kill('SIGKILL');
      }
    },
  );

  it('a port in use: one line, exit 2, as one process says it', CLI_TIMEOUT, async () => {
    const taken = net.createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    const port = (taken.address() as net.AddressInfo).port;
    try {
      const line = await oneErrorLine(
        runCli(['--upstream', fake.url, '--port', String(port), '--workers', '2', '--redis', REDIS_URL, '--log-level', 'warn']),
      );
      expect(line).toBe(`zulip-compat-shim: invalid configuration: server.port (--port): port ${port} on 127.0.0.1 is already in use`);
    } finally {
      await new Promise((r) => taken.close(r));
    }
  });
});
