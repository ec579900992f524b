import net from 'node:net';
import { REDIS_URL } from './redis.js';

/**
 * A TCP relay in front of the shared test Redis (REDIS_URL), to take the store away from a
 * shim and bring it back on the same port, as a network partition or a stopped Redis would,
 * without touching the Redis other tests use.
 */
export class RedisRelay {
  private server?: net.Server;
  private readonly sockets = new Set<net.Socket>();
  port = 0;

  /** The URL a store reaches Redis by through this relay. */
  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  async start(port = 0): Promise<void> {
    const target = new URL(REDIS_URL);
    this.server = net.createServer((client) => {
      const upstream = net.connect(Number(target.port || 6379), target.hostname);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {});
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((r) => this.server!.listen(port, '127.0.0.1', r));
    this.port = (this.server.address() as net.AddressInfo).port;
  }

  /** Cuts every connection and stops listening: the store is unreachable until `start(port)`. */
  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server!.close(() => r()));
  }
}
