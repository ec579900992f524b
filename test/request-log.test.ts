import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { loggablePath } from '../src/observability/logger.js';
import { startFake, type FakeZulip } from './support/fake-zulip.js';
import { parseAnswer } from './support/http-client.js';
import { startShim, type RunningShim } from './support/shim.js';
import { EVENT_WAIT } from './support/wait.js';

/** P13 in the request log: no credential from a request target reaches a log line. */

describe('loggablePath', () => {
  it('keeps parameter names, drops values and the user:password of an absolute-form target', () => {
    expect(loggablePath('/api/v1/messages?api_key=s3cret&anchor=newest')).toBe('/api/v1/messages?api_key&anchor');
    expect(loggablePath('http://someone:pa55word@chat.example.com/api/v1/users?api_key=k')).toBe(
      'http://chat.example.com/api/v1/users?api_key',
    );
    expect(loggablePath('https://token@chat.example.com:8443/x')).toBe('https://chat.example.com:8443/x');
    expect(loggablePath('//u:p@host/x')).toBe('//host/x');
    expect(loggablePath(undefined)).toBe('');
  });
});

describe('request log at trace level', () => {
  let fake: FakeZulip;
  let shim: RunningShim;
  const previous = process.env.TEST_LOG_LEVEL;

  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    process.env.TEST_LOG_LEVEL = 'trace';
    shim = await startShim(fake.url);
  });
  afterAll(async () => {
    if (previous === undefined) delete process.env.TEST_LOG_LEVEL;
    else process.env.TEST_LOG_LEVEL = previous;
    await shim.close();
    await fake.stop();
  });

  it('never prints user:password from an absolute-form request target', async () => {
    const { port } = new URL(shim.url);
    const answer = await new Promise<string>((resolve) => {
      const s = net.connect(Number(port), '127.0.0.1', () => {
        s.write(
          'GET http://someone:pa55word-abs@chat.example.com/api/v1/messages HTTP/1.1\r\nHost: chat.example.com\r\nConnection: close\r\n\r\n',
        );
      });
      let text = '';
      s.on('data', (d) => (text += d.toString()));
      s.on('close', () => resolve(text));
      s.on('error', () => resolve(text));
    });
    expect(answer).toMatch(/^HTTP\/1\.1 \d{3}/);
    // The line is written when the answer is done; the target went on in origin form (X15).
    for (let i = 0; i < 50 && !shim.logs.some((l) => l.includes('"/api/v1/messages"')); i++) {
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(shim.logs.some((l) => l.includes('"/api/v1/messages"'))).toBe(true);
    expect(shim.logs.filter((l) => l.includes('pa55word-abs'))).toEqual([]);
  });
});

describe('the access log (log.access)', () => {
  it('says who asked, with what, and how many bytes went each way; off, it says nothing and the metrics still count', async () => {
    const fake = await startFake({ era: '2.1' });
    const previous = process.env.TEST_LOG_LEVEL;
    process.env.TEST_LOG_LEVEL = 'info';
    const on = await startShim(fake.url);
    const off = await startShim(fake.url, { log: { access: 'off' } });
    try {
      const body = 'status=active&last_update_id=-1';
      for (const shim of [on, off]) {
        const r = await fetch(`${shim.url}/api/v1/users/me/presence`, {
          method: 'POST',
          headers: {
            authorization: fake.auth(11),
            'content-type': 'application/x-www-form-urlencoded',
            'user-agent': 'ZulipTerminal/0.7.0',
          },
          body,
        });
        expect(r.status).toBe(200);
        await r.arrayBuffer();
      }
      const lines = () => on.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'request completed');
      for (let i = 0; i < 50 && lines().length === 0; i++) await new Promise((r) => setTimeout(r, 20));
      const [line] = lines();
      expect(line).toMatchObject({ remote: expect.stringMatching(/127\.0\.0\.1/), userAgent: 'ZulipTerminal/0.7.0' });
      expect(line!.bytesIn as number).toBeGreaterThan(body.length);
      expect(line!.bytesOut as number).toBeGreaterThan(100);
      expect(off.logs.filter((l) => l.includes('request completed'))).toEqual([]);
      const metrics = await (await fetch(`${off.url}/metrics`)).text();
      expect(metrics).toMatch(/zulip_compat_shim_requests_total\{route="presence",method="POST",status="2xx"\} 1/);
    } finally {
      if (previous === undefined) delete process.env.TEST_LOG_LEVEL;
      else process.env.TEST_LOG_LEVEL = previous;
      await on.close();
      await off.close();
      await fake.stop();
    }
  });
});

describe('the request line written around pino', () => {
  it('is byte for byte the line pino itself writes for the same fields (but the time)', async () => {
    const { Writable } = await import('node:stream');
    const http = await import('node:http');
    const { createLogger } = await import('../src/observability/logger.js');
    const { requestLogger } = await import('../src/observability/request-log.js');
    const { recordFacts } = await import('../src/observability/request-facts.js');
    const { routeLabel } = await import('../src/http/api-routes.js');
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, cb) {
        lines.push(String(chunk));
        cb();
      },
    });
    const log = createLogger('info', sink);
    const logRequest = requestLogger(log);
    const server = http.createServer((req, res) => {
      const logged = logRequest(req, res, routeLabel(req.url ?? '/'));
      res.on('close', () => logged.closed());
      Object.assign(recordFacts(req), { upstreamMs: 12, realm: 'chat.example.com', featureLevel: 0, kind: 'delta' });
      res.end('{"result":"success"}');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as import('node:net').AddressInfo;
    await new Promise<void>((resolve, reject) => {
      http
        .get(
          {
            port,
            host: '127.0.0.1',
            path: '/api/v1/users/me/presence?api_key=x',
            headers: { 'user-agent': 'ZulipMobile/27.0', 'x-request-id': 'req-1' },
          },
          (res) => {
            res.resume();
            res.on('end', () => resolve());
          },
        )
        .on('error', reject);
    });
    await new Promise((r) => server.close(r));
    await new Promise((r) => setImmediate(r));
    const ours = lines.find((l) => l.includes('"request completed"'))!;
    expect(ours).toBeDefined();
    const fields = JSON.parse(ours) as Record<string, unknown>;
    const { level: _level, time, name: _name, msg, ...rest } = fields;
    lines.length = 0;
    log.info(rest, msg as string);
    const pinos = lines[0]!.replace(/"time":"[^"]*"/, `"time":"${time}"`);
    expect(ours).toBe(pinos);
  });
});

/**
 * The access line's bytesIn and bytesOut are one request's bytes, not the connection's: on a
 * kept-alive connection the second line counts only the second request and the second answer
 * (request-log.ts subtracts what the connection had carried when the previous answer ended).
 */
describe('bytes in and out on a kept-alive connection', () => {
  /** Reads answers off one connection, each as the exact bytes received (head and body, by Content-Length). */
  function answerReader(socket: net.Socket): () => Promise<Buffer> {
    let buffered = Buffer.alloc(0);
    let waiting: (() => void) | undefined;
    socket.on('data', (d: Buffer) => {
      buffered = Buffer.concat([buffered, d]);
      waiting?.();
    });
    socket.on('close', () => waiting?.());
    return async () => {
      for (;;) {
        const { complete, size } = parseAnswer(buffered);
        if (complete) {
          const answer = buffered.subarray(0, size);
          buffered = buffered.subarray(size);
          return answer;
        }
        if (socket.destroyed) throw new Error('the connection closed before a whole answer');
        await new Promise<void>((resolve) => (waiting = resolve));
      }
    };
  }

  it('counts each request and each answer exactly, the second without the first', async () => {
    const fake = await startFake({ era: '2.1' });
    const previous = process.env.TEST_LOG_LEVEL;
    process.env.TEST_LOG_LEVEL = 'info';
    // As from a proxy in front, whose request ids are kept.
    const shim = await startShim(fake.url, { server: { trustProxy: ['127.0.0.1'] } });
    const socket = net.connect(Number(new URL(shim.url).port), '127.0.0.1');
    try {
      await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
      const nextAnswer = answerReader(socket);
      // Passed through (not intercepted), of different sizes each way.
      const requests = [
        'GET /test/big?kb=3 HTTP/1.1\r\nHost: chat.example.com\r\nX-Request-Id: bytes-first\r\n\r\n',
        `GET /test/big?kb=5 HTTP/1.1\r\nHost: chat.example.com\r\nX-Request-Id: bytes-second\r\nUser-Agent: ${'a'.repeat(150)}\r\n\r\n`,
      ];
      const answers: Buffer[] = [];
      for (const r of requests) {
        socket.write(r); // the second only once the first answer is whole: one request at a time
        answers.push(await nextAnswer());
      }
      expect(answers.map((a) => a.toString('latin1', 0, 12))).toEqual(['HTTP/1.1 200', 'HTTP/1.1 200']);
      expect(socket.destroyed).toBe(false); // both on the one connection

      const lineOf = (id: string) =>
        shim.logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.reqId === id && l.msg === 'request completed');
      await vi.waitFor(() => expect(lineOf('bytes-second')).toBeDefined(), EVENT_WAIT);
      expect(lineOf('bytes-first')).toMatchObject({
        bytesIn: Buffer.byteLength(requests[0]!),
        bytesOut: answers[0]!.length,
      });
      expect(lineOf('bytes-second')).toMatchObject({
        bytesIn: Buffer.byteLength(requests[1]!),
        bytesOut: answers[1]!.length,
      });
    } finally {
      socket.destroy();
      if (previous === undefined) delete process.env.TEST_LOG_LEVEL;
      else process.env.TEST_LOG_LEVEL = previous;
      await shim.close();
      await fake.stop();
    }
  });
});

describe("the request line's time", () => {
  it('is the wall clock as it reads at the answer, stepped or not, not a clock of the process', async () => {
    const { createLogger } = await import('../src/observability/logger.js');
    const { requestLogger } = await import('../src/observability/request-log.js');
    const lines: string[] = [];
    const logRequest = requestLogger(createLogger('info', { write: (line: string) => lines.push(line) } as never));
    const socket = { bytesRead: 100, bytesWritten: 200, remoteAddress: '127.0.0.1' };
    const req = { method: 'GET', url: '/api/v1/users/me', headers: {}, socket } as never;
    const res = { writableFinished: true, statusCode: 200 } as never;
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      // The machine's clock stepped an hour ahead, then back a year, while the process runs.
      for (const at of ['2031-05-06T07:08:09.123Z', '2030-05-06T06:08:09.456Z']) {
        vi.setSystemTime(new Date(at));
        logRequest(req, res, 'users_me').closed();
        expect((JSON.parse(lines.at(-1)!) as { time: string }).time).toBe(at);
      }
    } finally {
      vi.useRealTimers();
    }
  });
});

/**
 * Issue 48: the access line names the client, not the proxy in front (nginx `real_ip` with
 * `real_ip_recursive`): behind a trusted peer, the rightmost X-Forwarded-For address that is not
 * itself trusted, the peer beside it; from an untrusted peer, X-Forwarded-For is its own claim and
 * the line names the peer. And access lines have their own switch: written at LOG_LEVEL=warn.
 */
describe("the access line's client and its own switch", () => {
  let fake: FakeZulip;
  const previous = process.env.TEST_LOG_LEVEL;
  beforeAll(async () => {
    fake = await startFake({ era: '2.1' });
    process.env.TEST_LOG_LEVEL = 'warn';
  });
  afterAll(async () => {
    if (previous === undefined) delete process.env.TEST_LOG_LEVEL;
    else process.env.TEST_LOG_LEVEL = previous;
    await fake.stop();
  });

  /** One passed-through GET with these headers; the access line written for it. */
  async function lineFor(shim: RunningShim, id: string, headers: Record<string, string>): Promise<Record<string, unknown>> {
    const r = await fetch(`${shim.url}/test/echo?id=${id}`, { headers: { host: 'chat.example.com', ...headers } });
    await r.arrayBuffer();
    const find = () =>
      shim.logs
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .find((l) => l.msg === 'request completed' && String((l.req as { path: string }).path) === '/test/echo?id');
    await vi.waitFor(() => expect(find()).toBeDefined(), EVENT_WAIT);
    const line = find()!;
    shim.logs.length = 0;
    return line;
  }

  it('behind a trusted proxy: the client X-Forwarded-For names (rightmost untrusted), the proxy as peer, its X-Request-Id kept; at LOG_LEVEL=warn', async () => {
    const shim = await startShim(fake.url, { server: { trustProxy: ['127.0.0.1', '10.0.0.0/8'] } });
    try {
      const line = await lineFor(shim, 'a', { 'x-forwarded-for': '198.51.100.66, 203.0.113.9, 10.1.2.3', 'x-request-id': 'edge-7' });
      expect(line).toMatchObject({ level: 30, remote: '203.0.113.9', peer: '127.0.0.1', reqId: 'edge-7' });
    } finally {
      await shim.close();
    }
  });

  it('from an untrusted peer: the peer, no peer field, and its X-Request-Id replaced', async () => {
    const shim = await startShim(fake.url);
    try {
      const line = await lineFor(shim, 'b', { 'x-forwarded-for': '203.0.113.9', 'x-request-id': 'edge-8' });
      expect(line.remote).toBe('127.0.0.1');
      expect(line).not.toHaveProperty('peer');
      expect(line.reqId).toMatch(/^[0-9a-f-]{36}$/);
    } finally {
      await shim.close();
    }
  });
});
