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
  /** Hands `socket` on to the upstream; an upgrade the upstream refuses or cuts closes it. */
  ws(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  /** No upgrade is forwarded from now on; the agent's sockets are closed. */
  close(): void;
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
      started ??= start();
      started.then(
        ({ proxy }) => {
          if (closed || socket.destroyed) socket.destroy();
          else proxy.ws(req, socket, head);
        },
        (err: unknown) => {
          o.log.warn({ err, path: loggablePath(req.url) }, o.failure);
          socket.destroy();
        },
      );
    },
    close() {
      closed = true;
      void started?.then(
        ({ proxy, agent }) => {
          proxy.close();
          agent.destroy();
        },
        () => {},
      );
    },
  };
}
