import http, { type IncomingHttpHeaders } from 'node:http';
import net from 'node:net';

/**
 * Plain HTTP clients for the abuse tests: `send` through Node's client (kept-alive agent,
 * per-request timeout, body written in pieces so that a client meeting an early 413 stops
 * writing), and `sendRaw` for bytes Node's client refuses to send (CR/LF in header values,
 * odd request targets).
 */

export interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

export interface Outgoing {
  method: string;
  /** Path and query as sent. */
  path: string;
  headers?: Record<string, string | string[]>;
  body?: Buffer;
  /** Transfer-Encoding: chunked instead of Content-Length. */
  chunked?: boolean;
}

export interface SendOptions {
  agent?: http.Agent | false;
  /** A request without a complete answer after this long is a hang: the promise rejects. */
  timeoutMs: number;
}

const PIECE = 16 * 1024;

export function send(base: string, o: Outgoing, opts: SendOptions): Promise<Answer> {
  const url = new URL(base);
  const headers: Record<string, string | string[]> = { ...(o.headers ?? {}) };
  const body = o.body;
  if (body !== undefined && !o.chunked && !Object.keys(headers).some((k) => k.toLowerCase() === 'content-length')) {
    headers['content-length'] = String(body.length);
  }
  if (o.chunked) headers['transfer-encoding'] = 'chunked';
  return new Promise<Answer>((resolve, reject) => {
    let answered = false;
    let settled = false;
    const finish = (err: Error | undefined, a?: Answer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) reject(err);
      else resolve(a!);
    };
    const req = http.request({
      host: url.hostname,
      port: url.port,
      method: o.method,
      path: o.path,
      headers,
      agent: opts.agent ?? false,
      setHost: !Object.keys(headers).some((k) => k.toLowerCase() === 'host'),
    });
    const timer = setTimeout(() => {
      req.destroy();
      finish(new Error(`no answer within ${opts.timeoutMs} ms: ${o.method} ${o.path.slice(0, 80)}`));
    }, opts.timeoutMs);
    req.on('response', (res) => {
      answered = true;
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        // A client that met an early answer (413) stops sending; the connection is done.
        if (!req.writableFinished) req.destroy();
        finish(undefined, { status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) });
      });
      res.on('error', (e) => finish(e));
      res.on('aborted', () => finish(new Error(`answer aborted: ${o.method} ${o.path.slice(0, 80)}`)));
    });
    req.on('error', (e) => {
      // Writing the rest of a refused body can fail once the answer is in: not an error.
      if (!answered) finish(e);
    });
    if (body === undefined || body.length === 0) {
      req.end();
      return;
    }
    void (async () => {
      for (let off = 0; off < body.length && !answered && !req.destroyed; off += PIECE) {
        if (!req.write(body.subarray(off, off + PIECE))) {
          await new Promise<void>((r) => {
            const done = () => {
              req.off('drain', done);
              req.off('response', done);
              req.off('close', done);
              r();
            };
            req.on('drain', done);
            req.on('response', done);
            req.on('close', done);
          });
        }
      }
      if (!answered && !req.destroyed) req.end();
    })();
  });
}

/** Parses the JSON body of an answer, or undefined when it is not JSON. */
export function jsonOf(a: Answer): unknown {
  try {
    return JSON.parse(a.body.toString('utf8'));
  } catch {
    return undefined;
  }
}

export interface RawAnswer {
  /** Everything the server sent. */
  bytes: Buffer;
  /** Status line code of the first answer, 0 if none. */
  status: number;
  /** Header block of the first answer, lower-cased names. */
  headers: Record<string, string>;
  /** Body of the first answer (by Content-Length). */
  body: Buffer;
  /** The server closed the connection. */
  closed: boolean;
}

/**
 * Writes raw bytes on a new connection and collects the first answer. Resolves when the
 * answer is complete (Content-Length), or the server closes (with `untilClosed`, only then);
 * rejects after `timeoutMs`.
 */
export function sendRaw(base: string, bytes: Buffer, timeoutMs: number, o: { untilClosed?: boolean } = {}): Promise<RawAnswer> {
  const url = new URL(base);
  return new Promise<RawAnswer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let closed = false;
    let done = false;
    const socket = net.connect(Number(url.port), url.hostname, () => socket.write(bytes));
    const timer = setTimeout(() => {
      socket.destroy();
      finish(new Error(`no answer within ${timeoutMs} ms to raw request ${JSON.stringify(bytes.subarray(0, 60).toString('latin1'))}`));
    }, timeoutMs);
    const finish = (err?: Error) => {
      if (done) return;
      const parsed = parseAnswer(Buffer.concat(chunks));
      if (!err && !closed && (!parsed.complete || o.untilClosed)) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      if (err) reject(err);
      else resolve({ bytes: Buffer.concat(chunks), status: parsed.status, headers: parsed.headers, body: parsed.body, closed });
    };
    socket.on('data', (d: Buffer) => {
      chunks.push(d);
      finish();
    });
    socket.on('close', () => {
      closed = true;
      finish();
    });
    // A reset after the answer is in still counts as closed; before it, the parse shows nothing.
    socket.on('error', () => {
      closed = true;
      finish();
    });
  });
}

/**
 * The first answer in bytes read off a connection: its status, headers and body (by
 * Content-Length), whether it is whole, and then its size (head and body) in `bytes`.
 */
export function parseAnswer(buf: Buffer): {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  complete: boolean;
  size: number;
} {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return { status: 0, headers: {}, body: Buffer.alloc(0), complete: false, size: 0 };
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const length = Number(headers['content-length'] ?? NaN);
  const rest = buf.subarray(end + 4);
  const complete = Number.isFinite(length) && rest.length >= length;
  return { status, headers, body: complete ? rest.subarray(0, length) : rest, complete, size: complete ? end + 4 + length : 0 };
}

/**
 * A raw WebSocket-style upgrade on a new connection: what the server sends, as text, once it
 * closes the connection, or (without `after`) once its first answer is whole. With `after`,
 * those bytes are sent as soon as the answer's head is in and the connection is ended when they
 * come back (an upstream that echoes). Rejected when none of that happened by `timeoutMs`: a
 * connection left open is no answer (an empty text means the server closed it unanswered).
 */
export function rawUpgrade(port: number, o: { path?: string; headers?: string; after?: string; timeoutMs?: number } = {}): Promise<string> {
  const timeoutMs = o.timeoutMs ?? 10_000;
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1', () =>
      s.write(`GET ${o.path ?? '/ws'} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n${o.headers ?? ''}\r\n`),
    );
    let text = '';
    let sent = false;
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      s.destroy();
    }, timeoutMs);
    s.on('data', (d: Buffer) => {
      text += d.toString('latin1');
      const headIn = text.includes('\r\n\r\n');
      if (o.after === undefined) {
        if (parseAnswer(Buffer.from(text, 'latin1')).complete) s.destroy();
      } else if (headIn && !sent) {
        sent = true;
        s.write(o.after);
      } else if (sent && text.endsWith(o.after)) s.end();
    });
    s.on('close', () => {
      clearTimeout(timer);
      if (timedOut)
        reject(new Error(`upgrade: the connection was still open after ${timeoutMs} ms (${JSON.stringify(text.slice(0, 200))} so far)`));
      else resolve(text);
    });
    s.on('error', () => s.destroy());
  });
}
