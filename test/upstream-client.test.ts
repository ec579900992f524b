import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import { UpstreamTimeoutError } from '../src/http/errors.js';
import { UpstreamClient, type UpstreamCall, type UpstreamResponse } from '../src/upstream/client.js';

/**
 * X3 as an API: an answer the shim reads whole comes only from `open`, which always carries the
 * total deadline; `stream` (answers passed on as they come) offers no way to read one whole.
 */

let server: http.Server;
let url: string;
beforeAll(async () => {
  // An answer that drips one byte every 100 ms and never ends by itself.
  server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    const timer = setInterval(() => res.write(' '), 100);
    res.on('close', () => clearInterval(timer));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

const call: UpstreamCall = {
  realm: { upstream: 'u', host: 'chat.example.com', key: 'k' },
  method: 'GET',
  path: '/api/v1/users',
  headers: {},
};

describe('UpstreamClient (X3)', () => {
  it('reads whole only within the total deadline, however slowly the answer drips', async () => {
    const client = new UpstreamClient({ target: url, timeoutMs: 600, maxSockets: 2, insecureTls: false, maxResponseBytes: 1 << 20 });
    const started = performance.now();
    const r = await client.open(call);
    await expect(r.read()).rejects.toBeInstanceOf(UpstreamTimeoutError);
    const ms = performance.now() - started;
    expect(ms).toBeGreaterThanOrEqual(550);
    expect(ms).toBeLessThan(5_000);
    await client.destroy();
  });

  it('has no deadline-free way to read an answer whole', () => {
    // A call cannot ask for its own deadline, and a streamed answer has no reader.
    expectTypeOf<UpstreamCall>().not.toHaveProperty('deadlineMs');
    expectTypeOf<UpstreamResponse>().not.toHaveProperty('read');
    expectTypeOf<UpstreamResponse>().not.toHaveProperty('readUpTo');
    expectTypeOf<typeof import('../src/upstream/client.js')>().not.toHaveProperty('readAll');
  });
});
