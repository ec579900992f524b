import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { promisify } from 'node:util';
import { gzip } from 'node:zlib';

const gzipAsync = promisify(gzip);

/** Below this, compressing costs more than it saves. */
export const MIN_GZIP_BYTES = 1024;

/** Does the client take gzip (and not with q=0)? */
export function acceptsGzip(req: IncomingMessage): boolean {
  const h = req.headers['accept-encoding'];
  if (!h) return false;
  return String(h)
    .split(',')
    .some((part) => {
      const [name, ...params] = part.trim().split(';');
      if (name?.trim().toLowerCase() !== 'gzip' && name?.trim() !== '*') return false;
      const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
      return !q || Number(q.slice(2)) > 0;
    });
}

/** Gzip off the event loop (zlib's thread pool): large presence and register answers. */
export function gzipBody(raw: Buffer): Promise<Buffer> {
  return gzipAsync(raw, { level: 6 });
}

/** A JSON answer the shim made, to send raw or gzipped. `gz` is computed at most once. */
export interface Encodable {
  raw: Buffer;
  gz?: Promise<Buffer>;
}

/**
 * Sends a JSON answer of the shim's own making, gzipped when the client accepts it and it is
 * worth it (the upstream's nginx would have compressed it too).
 */
export async function sendEncoded(
  req: IncomingMessage,
  res: ServerResponse,
  status: number,
  body: Encodable,
  headers: OutgoingHttpHeaders = {},
): Promise<number> {
  let bytes = body.raw;
  const out: OutgoingHttpHeaders = { ...headers, 'content-type': 'application/json' };
  if (body.raw.length >= MIN_GZIP_BYTES) {
    out.vary = 'Accept-Encoding';
    if (acceptsGzip(req)) {
      body.gz ??= gzipBody(body.raw);
      bytes = await body.gz;
      out['content-encoding'] = 'gzip';
    }
  }
  out['content-length'] = String(bytes.length);
  res.writeHead(status, out);
  res.end(bytes);
  return bytes.length;
}
