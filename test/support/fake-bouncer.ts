import http, { type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A stand-in for Zulip's push notification bouncer (zilencer, push.zulipchat.com): it keeps every
 * request as it arrived (method, target, headers, body bytes) and answers as told, by default as
 * the bouncer answers a notification (`total_android_devices`, …) or any other call (success).
 */

export interface BouncerCall {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface BouncerReply {
  status: number;
  headers?: Record<string, string>;
  body: string | Buffer;
}

export interface FakeBouncer {
  readonly url: string;
  readonly calls: BouncerCall[];
  /** How the next calls are answered; by default as the bouncer answers a success. */
  reply: (call: BouncerCall) => BouncerReply | 'hang';
  stop(): Promise<void>;
}

export const NOTIFY_SUCCESS = JSON.stringify({
  result: 'success',
  msg: '',
  total_android_devices: 1,
  total_apple_devices: 1,
  deleted_devices: { android_devices: [], apple_devices: [] },
  realm: null,
});

export function successReply(call: BouncerCall): BouncerReply {
  const notify = call.url === '/api/v1/remotes/push/notify';
  return { status: 200, headers: { 'content-type': 'application/json' }, body: notify ? NOTIFY_SUCCESS : '{"result":"success","msg":""}' };
}

export async function startFakeBouncer(): Promise<FakeBouncer> {
  const calls: BouncerCall[] = [];
  const fake = { calls, reply: successReply as FakeBouncer['reply'] };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const call = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks) };
      calls.push(call);
      const reply = fake.reply(call);
      if (reply === 'hang') return;
      res.writeHead(reply.status, reply.headers ?? {});
      res.end(reply.body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(fake, {
    url: `http://127.0.0.1:${port}`,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}
