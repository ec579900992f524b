import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import busboy from 'busboy';
import { badRequest, bodyTooLarge } from './errors.js';
import { contentLengthOf } from './headers.js';

/**
 * Request bodies are read only on intercepted endpoints (no global body parser), bounded,
 * and parsed the way Zulip's Django views read them: form-urlencoded or multipart/form-data,
 * a POST value winning over a query value, the last of duplicated names winning.
 */

/** A body read up to a limit: whole, or what was read and the rest of the stream, paused. */
export type Bounded = { whole: true; body: Buffer } | { whole: false; head: Buffer[]; size: number; rest: Readable };

/**
 * The one bounded body reader (requests and upstream answers alike): reads up to `limit`
 * bytes; past it, hands back what was read and the rest of the stream, paused and intact, for
 * the caller to refuse, stream on or destroy. Stream errors are passed on as they are.
 *
 * `expectedBytes` (a declared Content-Length within the limit): the body is copied into one
 * buffer of that size as it arrives, so a large answer is never joined in one block at its end
 * (B7: joining a 250k-user presence answer held the event loop for about 100 ms).
 */
export function readUpTo(body: Readable, limit: number, expectedBytes?: number): Promise<Bounded> {
  // Not `for await`: leaving that loop early would destroy the stream handed back.
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const sized = expectedBytes !== undefined && Number.isSafeInteger(expectedBytes) && expectedBytes > 0 && expectedBytes <= limit;
    const into = sized ? Buffer.allocUnsafe(expectedBytes) : undefined;
    const onData = (chunk: Buffer) => {
      if (into && size + chunk.length <= into.length) chunk.copy(into, size);
      else {
        if (into && chunks.length === 0) chunks.push(into.subarray(0, size)); // more than declared
        chunks.push(chunk);
      }
      size += chunk.length;
      if (size > limit) {
        body.pause();
        cleanup();
        // Past the limit, so past any buffer of the declared size: what was read is in chunks.
        resolve({ whole: false, head: chunks, size, rest: body });
      }
    };
    const onEnd = () => {
      cleanup();
      resolve({ whole: true, body: into && chunks.length === 0 ? into.subarray(0, size) : Buffer.concat(chunks, size) });
    };
    const onError = (e: Error) => {
      cleanup();
      reject(e);
    };
    const onClose = () => {
      // Destroyed without an error (the client went away): never resolves otherwise.
      if (!body.readableEnded) onError(Object.assign(new Error('stream closed before its end'), { code: 'ECONNRESET' }));
    };
    const cleanup = () => {
      body.off('data', onData);
      body.off('end', onEnd);
      body.off('error', onError);
      body.off('close', onClose);
    };
    body.on('data', onData);
    body.on('end', onEnd);
    body.on('error', onError);
    body.on('close', onClose);
  });
}

/**
 * Reads a request body up to `limit` bytes; past it, a 413 (E2). The request is paused, not
 * destroyed, at the limit: destroying it would reset the socket before the 413 could be read (X6).
 */
export async function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = contentLengthOf(req.headers);
  if (declared !== undefined && declared > limit) throw bodyTooLarge(limit);
  const read = await readUpTo(req, limit);
  if (!read.whole) throw bodyTooLarge(limit);
  return read.body;
}

/** Ordered parameters as sent; `get` follows Django's QueryDict (last value wins). */
export class Params {
  constructor(readonly entries: ReadonlyArray<readonly [string, string]>) {}

  get(name: string): string | undefined {
    for (let i = this.entries.length - 1; i >= 0; i--) {
      const e = this.entries[i]!;
      if (e[0] === name) return e[1];
    }
    return undefined;
  }

  has(name: string): boolean {
    return this.entries.some((e) => e[0] === name);
  }

  names(): Set<string> {
    return new Set(this.entries.map((e) => e[0]));
  }
}

function queryEntries(url: string | undefined): Array<[string, string]> {
  const q = url?.indexOf('?') ?? -1;
  if (!url || q < 0) return [];
  return [...new URLSearchParams(url.slice(q + 1))];
}

function multipartEntries(contentType: string, body: Buffer): Promise<Array<[string, string]>> {
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      bb = busboy({ headers: { 'content-type': contentType }, defParamCharset: 'utf8' });
    } catch {
      reject(badRequest('Malformed multipart/form-data body'));
      return;
    }
    const out: Array<[string, string]> = [];
    bb.on('field', (name, value) => out.push([name, value]));
    // A body cut inside a file part destroys its stream with an error: without a listener
    // that error would be uncaught and take the process down (E4). The form's own 'error' answers.
    bb.on('file', (_name, stream) => stream.on('error', () => {}).resume());
    bb.on('error', () => reject(badRequest('Malformed multipart/form-data body')));
    bb.on('close', () => resolve(out));
    bb.end(body);
  });
}

/** Whether a body of this Content-Type holds form fields, as Django reads request.POST (none given: a form). */
export function isFormEncoded(contentType: string | undefined): boolean {
  const type = (contentType ?? '').toLowerCase();
  return type === '' || type.startsWith('application/x-www-form-urlencoded');
}

/** Query parameters, then body parameters (which win in `get`, as in Django's REQ). */
export async function parseParams(req: IncomingMessage, body: Buffer): Promise<Params> {
  const entries = queryEntries(req.url);
  const type = (req.headers['content-type'] ?? '').toLowerCase();
  if (body.length > 0) {
    if (type.startsWith('multipart/form-data')) {
      entries.push(...(await multipartEntries(req.headers['content-type']!, body)));
    } else if (isFormEncoded(type)) {
      entries.push(...new URLSearchParams(body.toString('utf8')));
    }
    // Any other content type gives no form parameters, as in Django's request.POST; the
    // upstream then words the error (a missing `status`, say) as it always has.
  }
  return new Params(entries);
}

/** Form-urlencodes parameters for the upstream (Zulip's own encoding for every era). */
export function encodeForm(entries: Iterable<readonly [string, string]>): string {
  return new URLSearchParams([...entries] as Array<[string, string]>).toString();
}
