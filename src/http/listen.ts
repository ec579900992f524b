import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * Node's server timeouts for a server that carries Zulip traffic: never cut a long poll
 * (GET /events blocks ~90 s), and keep idle connections open longer than a load balancer does.
 */
export function allowLongPolls(server: Server): void {
  server.requestTimeout = 0;
  server.headersTimeout = 60_000;
  server.keepAliveTimeout = 65_000;
  server.timeout = 0;
}

/** Listens on a port (0: any free one) and resolves with the address as a URL. */
export function listen(server: Server, port: number, host: string): Promise<{ port: number; url: string }> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const addr = server.address() as AddressInfo;
      const shown = addr.address.includes(':') ? `[${addr.address}]` : addr.address;
      resolve({ port: addr.port, url: `http://${shown}:${addr.port}` });
    });
  });
}
