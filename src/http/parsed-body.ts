import { IncomingMessage } from 'node:http';
import { declaresBody } from './headers.js';

/**
 * A request whose body a parser has already read (Express's `express.json()`,
 * `express.urlencoded()`, `express.raw()`, `express.text()` mounted globally, as most apps do),
 * made readable again from what the parser left in `req.body`: the shim then serves or passes
 * it on as if it had read the stream itself. What http-proxy-middleware's `fixRequestBody` sends
 * on (JSON as JSON, a form as a form, with its own Content-Length), as a request of its own so
 * every step of the shim (the body's reader, the pass-through, the recorder) reads it unchanged.
 */

/** The request declares a body and something has read it already (as on-finished tells it). */
export function bodyReadBefore(req: IncomingMessage): boolean {
  return declaresBody(req.headers) && (req.readableEnded || (req.complete && !req.readable));
}

/** The media type of a Content-Type, lower-case, without its parameters. */
function mediaType(contentType: string | undefined): string {
  return (contentType ?? '').split(';', 1)[0]!.trim().toLowerCase();
}

/** A Content-Type's charset (lower-case), if it names one. */
function charsetOf(contentType: string | undefined): string | undefined {
  return /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType ?? '')?.[1]?.toLowerCase();
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A parsed form (`express.urlencoded()`, flat with `extended: false`, nested with `qs`) as the
 * form it came as: a value per name, a repeated name for an array of strings, nested names in
 * brackets (`a[b]=1`, `a[]=1`, `a[0][b]=1`, as qs reads them). undefined when a value is none
 * of these (a parser of another kind put it there): that body cannot be rebuilt.
 */
export function formOf(fields: Record<string, unknown>): string | undefined {
  const pairs: string[] = [];
  const add = (name: string, value: unknown, nested: boolean): boolean => {
    if (typeof value === 'string') {
      pairs.push(`${encodeURIComponent(name)}=${encodeURIComponent(value)}`);
      return true;
    }
    if (Array.isArray(value)) {
      return value.every((v, i) =>
        // `a=1&a=2` at the top (both parsers' reading of it), `a[]=1` below it, `a[0][b]` for objects.
        typeof v === 'string' ? add(nested ? `${name}[]` : name, v, nested) : isRecord(v) && add(`${name}[${i}]`, v, true),
      );
    }
    if (isRecord(value)) return Object.entries(value).every(([k, v]) => add(`${name}[${k}]`, v, true));
    return false;
  };
  for (const [name, value] of Object.entries(fields)) if (!add(name, value, false)) return undefined;
  return pairs.join('&');
}

/**
 * The bytes a parsed body came as, as near as they can be rebuilt: a Buffer (`express.raw()`)
 * as it is; JSON (`application/json`, `…+json`) re-serialised; a form re-encoded (formOf); text
 * in UTF-8 when it came so. undefined when it cannot be rebuilt (multipart, whose files a parser
 * took away; another charset; a value no parser of that type makes).
 */
export function bytesOfParsedBody(body: unknown, contentType: string | undefined): Buffer | undefined {
  if (Buffer.isBuffer(body)) return body;
  if (body === undefined) return undefined;
  const type = mediaType(contentType);
  if (type === 'application/json' || type.endsWith('+json')) {
    const json = JSON.stringify(body);
    return json === undefined ? undefined : Buffer.from(json);
  }
  if (type === 'application/x-www-form-urlencoded') {
    const form = isRecord(body) ? formOf(body) : undefined;
    return form === undefined ? undefined : Buffer.from(form);
  }
  if (typeof body === 'string' && type.startsWith('text/')) {
    const charset = charsetOf(contentType);
    return charset === undefined || charset === 'utf-8' || charset === 'utf8' ? Buffer.from(body) : undefined;
  }
  return undefined;
}

/** Headers that described the body as it came and not as it is rebuilt (a parser inflated a gzipped one). */
const DESCRIBED_THE_OLD_BODY = new Set(['content-length', 'transfer-encoding', 'content-encoding']);

/**
 * A new request like `req` (its socket, method, target and headers) whose body is `bytes`, with
 * the Content-Length of those bytes (and no Transfer-Encoding or Content-Encoding), whole and
 * ready to read. The response stays `req`'s.
 */
export function requestWithBody(req: IncomingMessage, bytes: Buffer): IncomingMessage {
  const rebuilt = new IncomingMessage(req.socket);
  // Its bytes are all here: reading it must not resume the client's socket, as Node's own does.
  rebuilt._read = () => {};
  rebuilt.httpVersionMajor = req.httpVersionMajor;
  rebuilt.httpVersionMinor = req.httpVersionMinor;
  rebuilt.httpVersion = req.httpVersion;
  rebuilt.method = req.method;
  rebuilt.url = req.url;
  const headers: Record<string, string | string[] | undefined> = {};
  for (const [name, value] of Object.entries(req.headers)) if (!DESCRIBED_THE_OLD_BODY.has(name)) headers[name] = value;
  headers['content-length'] = String(bytes.length);
  rebuilt.headers = headers;
  const raw: string[] = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    if (!DESCRIBED_THE_OLD_BODY.has(req.rawHeaders[i]!.toLowerCase())) raw.push(req.rawHeaders[i]!, req.rawHeaders[i + 1]!);
  }
  raw.push('Content-Length', String(bytes.length));
  rebuilt.rawHeaders = raw;
  if (bytes.length > 0) rebuilt.push(bytes);
  rebuilt.push(null);
  rebuilt.complete = true;
  return rebuilt;
}

/**
 * `req` rebuilt from what a body parser left in `req.body` (see requestWithBody), or undefined
 * when that body cannot be rebuilt (bytesOfParsedBody).
 */
export function requestFromParsedBody(req: IncomingMessage & { body?: unknown }): IncomingMessage | undefined {
  const bytes = bytesOfParsedBody(req.body, req.headers['content-type']);
  return bytes === undefined ? undefined : requestWithBody(req, bytes);
}
