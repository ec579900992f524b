import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A stand-in for one Zulip server hosting several realms: requests go to the upstream named
 * by their Host header (as Zulip picks the realm by host name), streamed both ways.
 */
export interface HostRouter {
  url: string;
  close(): Promise<void>;
}

export async function startHostRouter(byHost: Record<string, string>): Promise<HostRouter> {
  const server = http.createServer((req, res) => {
    const target = byHost[(req.headers.host ?? '').toLowerCase()];
    if (!target) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"result":"error","msg":"No such realm","code":"BAD_REQUEST"}');
      return;
    }
    const t = new URL(target);
    const up = http.request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
