import net from 'node:net';

/**
 * Raw TCP clients for the capacity tests (X11): connections that send a request at once, or
 * nothing, or a body a byte at a time, and crowds of them that come back when closed.
 */

export interface RawClient {
  socket: net.Socket;
  /** The status of the first answer, once its status line came; 0 when the connection closed without one. */
  status: Promise<number>;
  /** Everything the connection received, once it closed. */
  closed: Promise<string>;
  /** What it received so far. */
  received(): string;
}

/** A connection to `url` that sends `request` as soon as it is open (nothing, when undefined). */
export function rawClient(url: string, request?: string, o: { localAddress?: string } = {}): RawClient {
  const { hostname, port } = new URL(url);
  const socket = net.connect({ host: hostname, port: Number(port), ...(o.localAddress ? { localAddress: o.localAddress } : {}) });
  let got = '';
  let resolveStatus!: (n: number) => void;
  const status = new Promise<number>((r) => (resolveStatus = r));
  const closed = new Promise<string>((resolve) => {
    socket.on('data', (d) => {
      got += String(d);
      const m = /^HTTP\/1\.1 (\d{3})/.exec(got);
      if (m) resolveStatus(Number(m[1]));
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      resolveStatus(0);
      resolve(got);
    });
  });
  // Written now, kept by the socket until it connects: anything written after it goes after it.
  if (request !== undefined) socket.write(request);
  return { socket, status, closed, received: () => got };
}

/** The JSON body of a raw answer. */
export function bodyOf(answer: string): unknown {
  return JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4));
}

export interface Crowd {
  /** Connections closed (by the shim, or their requests answered) so far, each opened again. */
  closes(): number;
  /** The status lines' codes the crowd's requests got (0: closed without an answer). */
  statuses(): number[];
  /** Closes every connection for good. */
  stop(): void;
}

/**
 * `n` connections to `url`, each opened again `reopenMs` after it closes, as an attacker keeps
 * them: sending `request(i)` at once (nothing, when undefined), then `drip` every `dripMs`.
 */
export function crowd(
  url: string,
  n: number,
  o: { reopenMs: number; request?: (i: number) => string; drip?: string; dripMs?: number; localAddress?: (i: number) => string },
): Crowd {
  let running = true;
  let closes = 0;
  const statuses: number[] = [];
  const open = new Set<net.Socket>();
  const start = (i: number) => {
    if (!running) return;
    const c = rawClient(url, o.request?.(i), o.localAddress ? { localAddress: o.localAddress(i) } : {});
    open.add(c.socket);
    const timer = o.drip && o.dripMs ? setInterval(() => c.socket.write(o.drip!), o.dripMs) : undefined;
    void c.closed.then(async () => {
      clearInterval(timer);
      open.delete(c.socket);
      if (!running) return;
      closes++;
      statuses.push(await c.status);
      setTimeout(() => start(i), o.reopenMs);
    });
  };
  for (let i = 0; i < n; i++) start(i);
  return {
    closes: () => closes,
    statuses: () => statuses,
    stop() {
      running = false;
      for (const s of open) s.destroy();
    },
  };
}

/**
 * A shim's /metrics text, asked on a connection of its own that closes after the answer (a
 * kept-alive one could be closed as idle by a shim at its cap just as the next request goes out).
 */
export async function metricsText(url: string): Promise<string> {
  const answer = await rawClient(url, 'GET /metrics HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n').closed;
  return answer.slice(answer.indexOf('\r\n\r\n') + 4);
}
