import type { IncomingMessage } from 'node:http';
import busboy from 'busboy';
import { badRequest, bodyTooLarge } from './errors.js';

/**
 * Request bodies are read only on intercepted endpoints (no global body parser), bounded,
 * and parsed the way Zulip's Django views read them: form-urlencoded or multipart/form-data,
 * a POST value winning over a query value, the last of duplicated names winning.
 */

/**
 * Reads the body up to `limit` bytes; past it, a 413 (E2). The request is paused, not destroyed,
 * at the limit: destroying it would reset the socket before the 413 could be read (X6).
 */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) return Promise.reject(bodyTooLarge(limit));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const stop = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('close', onClose);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        stop();
        req.pause();
        reject(bodyTooLarge(limit));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      stop();
      resolve(Buffer.concat(chunks, size));
    };
    const onError = (err: Error) => {
      stop();
      reject(err);
    };
    // A client gone before the end of its body: nothing to answer.
    const onClose = () => onError(new Error('the client closed the connection before the end of its request body'));
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onError);
    req.once('close', onClose);
  });
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

/** Query parameters, then body parameters (which win in `get`, as in Django's REQ). */
export async function parseParams(req: IncomingMessage, body: Buffer): Promise<Params> {
  const entries = queryEntries(req.url);
  const type = (req.headers['content-type'] ?? '').toLowerCase();
  if (body.length > 0) {
    if (type.startsWith('multipart/form-data')) {
      entries.push(...(await multipartEntries(req.headers['content-type']!, body)));
    } else if (type === '' || type.startsWith('application/x-www-form-urlencoded')) {
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
