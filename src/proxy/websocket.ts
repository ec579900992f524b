import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import type { Duplex } from 'node:stream';
import type { ProxyServer } from 'http-proxy-3';
import { loggablePath, type Logger } from '../observability/logger.js';

/**
 * T1: a WebSocket upgrade goes on to the upstream as it came, through http-proxy-3 (undici has
 * no equal for handing over a raw upgraded socket). Zulip's own clients long-poll and never
 * upgrade, so the library and its connection agent are made on the first upgrade, not at
 * start-up (about 0.3 MB of heap and 7 ms of start-up a shim would otherwise spend on them).
 * The pass-through and the recorder each hold one.
 */
export interface WebSocketForwarder {
  /**
   * Hands `socket` on to the upstream: its answer goes back as it came (a 101 and the bytes
   * both ways after it, or its refusal, after which the connection closes); an upstream that
   * cannot be reached closes it with a warning.
   */
  ws(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  /** No upgrade is forwarded from now on; resolves once the agent's sockets are closed. */
  close(): Promise<void>;
}

export interface WebSocketForwarderOptions {
  target: string;
  insecureTls: boolean;
  log: Logger;
  /** What the warning of a failed upgrade says. */
  failure: string;
}

interface Started {
  proxy: ProxyServer;
  agent: http.Agent;
}

export function webSocketForwarder(o: WebSocketForwarderOptions): WebSocketForwarder {
  let started: Promise<Started> | undefined;
  let closed = false;

  const start = async (): Promise<Started> => {
    const { createProxyServer } = await import('http-proxy-3');
    const agent = o.target.startsWith('https:')
      ? new https.Agent({ keepAlive: true, rejectUnauthorized: !o.insecureTls })
      : new http.Agent({ keepAlive: true });
    const proxy = createProxyServer({ target: o.target, agent, ws: true, xfwd: false, changeOrigin: false, secure: !o.insecureTls });
    // Without an error handler http-proxy would throw and take the process down (E4).
    proxy.on('error', (err, req, socket) => {
      o.log.warn({ err, path: loggablePath(req.url) }, o.failure);
      (socket as Duplex).destroy();
    });
    proxy.on('econnreset', () => {});
    return { proxy, agent };
  };

  return {
    ws(req, socket, head) {
      socket.on('error', () => socket.destroy());
      if (closed) {
        socket.destroy();
        return;
      }
      const failed = (err: unknown) => {
        o.log.warn({ err, path: loggablePath(req.url) }, o.failure);
        socket.destroy();
      };
      started ??= start();
      started.then(({ proxy }) => {
        if (closed || socket.destroyed) {
          socket.destroy();
          return;
        }
        try {
          proxy.ws(req, socket, head);
        } catch (err) {
          failed(err); // E4: a throw here would otherwise end the process as an unhandled rejection
        }
      }, failed);
    },
    async close() {
      closed = true;
      const s = await started?.catch(() => undefined);
      s?.proxy.close();
      s?.agent.destroy();
    },
  };
}
