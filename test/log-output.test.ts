import { spawn, spawnSync } from 'node:child_process';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from './support/build.js';
import { logLine, runCli, until, type CliRun } from './support/cli-run.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';

/**
 * The shim's stdout (observability/logger.ts): log lines go out through a buffer, a batch per
 * write. Every request's line reaches stdout whole, once, when the shim is busy and when it
 * stops right after its last answer. Checked through the CLI, as operators run it, with a request id per request.
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
 * Starts the CLI, waits for its start-up line, sends every request, stops it with SIGTERM right
 * after the last answer, and checks its stdout once it exited.
 */
async function sendThenStop(prefix: string): Promise<void> {
  // The requests come as from a proxy in front, whose X-Request-Id the shim keeps.
  const run = runCli(['--upstream', fake.url, '--port', '0', '--log-level', 'info', '--trust-proxy', '127.0.0.1']);
  try {
    await until('listening', () => (logLine(run, 'zulip-compat-shim listening') ? true : undefined));
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
    await sendThenStop('one');
  });
});

describe('stdout: the last lines at exit', CLI_TIMEOUT, () => {
  it.each([
    ['exits at once', 'exit'],
    ['lets its event loop run dry', 'drain'],
  ])('are written before the process goes, even to a pipe nobody reads yet: a process that %s', CLI_TIMEOUT, async (_, mode) => {
    // A shell pipe: the kernel's buffer fills and nothing reads it for a second (a Node parent
    // would read the pipe into its own memory at once). The child runs under tsx: with its
    // loader thread, Node's exit does not wait for a write still under way on libuv's thread
    // pool, so only lines written at exit itself, synchronously, arrive.
    const child = [process.execPath, '--import', 'tsx', 'test/support/log-exit-child.ts', mode].map((a) => `'${a}'`).join(' ');
    const run = spawn('sh', ['-c', `${child} | (sleep 1; cat)`], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    run.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const code = await new Promise<number | null>((r) => run.on('close', r));
    expect(code).toBe(0);
    const lines = out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => (JSON.parse(l) as { n: number }).n);
    expect(lines).toEqual([1, 2, 3]);
  });
});

describe('the stdout logger and the process', () => {
  it('importing it adds no exit listener; the first stdout logger adds one, for every stdout logger', CLI_TIMEOUT, () => {
    const script = [
      "const before = process.listenerCount('exit');",
      "const { createLogger } = await import('./src/observability/logger.ts');",
      "const imported = process.listenerCount('exit') - before;",
      "createLogger('silent');",
      "const one = process.listenerCount('exit') - before;",
      "createLogger('silent');",
      "console.log(JSON.stringify({ imported, one, two: process.listenerCount('exit') - before }));",
    ].join('\n');
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, encoding: 'utf8' });
    expect(r.status).toBe(0);
    const counts = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { imported: number; one: number; two: number };
    expect(counts.imported).toBe(0);
    // Ours and pino's own (one for all its streams); a second logger adds neither.
    expect(counts).toEqual({ imported: 0, one: 2, two: 2 });
  });
});
