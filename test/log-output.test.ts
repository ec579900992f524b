import { mkdtempSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { logLine, runCli, until, type CliRun } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { adminRedis, deleteKeysUnder, describeRedis, REDIS_URL, testKeyPrefix } from './support/redis.js';

/**
 * The shim's stdout (observability/logger.ts): log lines go out through a buffer, a batch per
 * write. Every request's line reaches stdout whole, once, when the shim is busy and when it
 * stops right after its last answer; cluster workers share one stdout and never split each
 * other's lines. Checked through the CLI, as operators run it, with a request id per request.
 */

const CLI_TIMEOUT = { timeout: 90_000 };
const REQUESTS = 1_500;
const CONNECTIONS = 20;

/** GETs with the request ids `prefix-0` … over kept-alive connections; each must answer 200. */
async function sendAll(listen: URL, prefix: string): Promise<void> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  let next = 0;
  const one = (id: string) =>
    new Promise<void>((resolve, reject) => {
      const req = http.get(
        { host: listen.hostname, port: listen.port, path: `/test/echo?n=${id}`, headers: { 'x-request-id': id }, agent },
        (res) => {
          res.resume();
          res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`${id}: ${res.statusCode}`))));
        },
      );
      req.on('error', reject);
    });
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      while (next < REQUESTS) await one(`${prefix}-${next++}`);
    }),
  );
  agent.destroy();
}

/** Every stdout line is one JSON object, and each request id has exactly one "request completed" line. */
function expectEveryLineOnce(run: CliRun, prefix: string): void {
  const counts = new Map<string, number>();
  for (const line of run.stdout) {
    if (line === '') continue;
    const o = JSON.parse(line) as { msg?: string; reqId?: string };
    if (o.msg === 'request completed' && o.reqId?.startsWith(`${prefix}-`)) counts.set(o.reqId, (counts.get(o.reqId) ?? 0) + 1);
  }
  const missing = Array.from({ length: REQUESTS }, (_, i) => `${prefix}-${i}`).filter((id) => counts.get(id) !== 1);
  expect(missing).toEqual([]);
}

let fake: FakeZulip;
beforeAll(async () => {
  fake = await startFake({ era: '8.0' });
});
afterAll(async () => {
  await fake.stop();
});

/**
 * Starts the CLI with `args`, waits for `workers` start-up lines, sends every request, stops it
 * with SIGTERM right after the last answer, and checks its stdout once it exited.
 */
async function sendThenStop(args: string[], workers: number, prefix: string): Promise<void> {
  const run = runCli(['--upstream', fake.url, '--port', '0', '--log-level', 'info', ...args]);
  try {
    await until(`${workers} listening`, () =>
      run.stdout.filter((l) => l.includes('"msg":"zulip-compat-shim listening"')).length >= workers ? true : undefined,
    );
    await sendAll(new URL(String(logLine(run, 'zulip-compat-shim listening')!.listen)), prefix);
    run.child.kill('SIGTERM');
    expect(await run.exited).toBe(0);
    expectEveryLineOnce(run, prefix);
  } finally {
    run.child.kill('SIGKILL');
  }
}

describe('stdout: the request log as written', CLI_TIMEOUT, () => {
  it('one process: every line whole and once, the last ones too when SIGTERM follows the last answer', CLI_TIMEOUT, async () => {
    await sendThenStop([], 1, 'one');
  });
});

describeRedis('stdout: cluster workers share it', () => {
  const prefix = testKeyPrefix();
  afterAll(async () => {
    const redis = adminRedis();
    await deleteKeysUnder(redis, prefix);
    redis.disconnect();
  });

  // node:cluster hands the kept-alive connections to the workers in turn: both write at once.
  it('two workers writing at once: every line whole and once', CLI_TIMEOUT, async () => {
    const config = join(mkdtempSync(join(tmpdir(), 'zcs-log-')), 'shim.json');
    writeFileSync(config, JSON.stringify({ store: { keyPrefix: prefix } }));
    await sendThenStop(['--workers', '2', '--redis', REDIS_URL, '--config', config], 2, 'cluster');
  });
});
