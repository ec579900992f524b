import { readFile } from 'node:fs/promises';
import zlib from 'node:zlib';
import { bodyBytes } from './har.js';
import { matchOf, type Match } from './match.js';

/**
 * Reads a HAR for replay (H2): the shim's own recordings and the exports of Chrome, Firefox
 * and mitmproxy (`.zhar`, zlib-compressed, too). Extra fields are ignored; an entry without
 * a usable answer (status 0: blocked or aborted in the browser) is skipped.
 */

export interface Recorded {
  /** Position in the file. */
  index: number;
  match: Match;
  status: number;
  statusText: string;
  headers: Array<[string, string]>;
  body: Buffer;
  /** Milliseconds the recorded exchange took. */
  time: number;
}

interface LoadedHar {
  entries: Recorded[];
  skipped: number;
}

/**
 * Response headers that described the recorded transfer, not the answer: the body is replayed
 * decoded (HAR `content.text`), so its length and transfer are recomputed. HTTP/2 pseudo
 * headers (`:status`) from browser exports go too.
 */
const NOT_REPLAYED = new Set([
  'content-length',
  'transfer-encoding',
  'content-encoding',
  'connection',
  'keep-alive',
  'proxy-connection',
  'upgrade',
  'te',
  'trailer',
]);

class HarFormatError extends Error {
  override name = 'HarFormatError';
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => !!v && typeof v === 'object' && !Array.isArray(v);
const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

function nameValues(v: unknown): Array<[string, string]> {
  if (!Array.isArray(v)) return [];
  return v
    .filter(isObj)
    .flatMap((h) => (typeof h.name === 'string' && h.value !== undefined ? [[h.name, String(h.value)] as [string, string]] : []));
}

function decompress(raw: Buffer): Buffer {
  if (raw[0] === 0x1f && raw[1] === 0x8b) return zlib.gunzipSync(raw);
  // zlib header (mitmproxy's .zhar): CMF 0x78, and CMF*256+FLG divisible by 31.
  if (raw[0] === 0x78 && raw.length > 1 && ((raw[0] << 8) | raw[1]!) % 31 === 0) return zlib.inflateSync(raw);
  return raw;
}

export async function loadHar(file: string): Promise<LoadedHar> {
  const entries = await harEntries(file);
  const out: Recorded[] = [];
  for (const [index, e] of entries.entries()) {
    const recorded = await recordedOf(e, index);
    if (recorded) out.push(recorded);
  }
  return { entries: out, skipped: entries.length - out.length };
}

/** The file's `log.entries`, read, decompressed and parsed; a HarFormatError if it has none. */
async function harEntries(file: string): Promise<unknown[]> {
  let raw: Buffer;
  try {
    raw = await readFile(file);
  } catch (e) {
    throw new HarFormatError(`cannot read ${file} (${(e as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  let har: unknown;
  try {
    har = JSON.parse(
      decompress(raw)
        .toString('utf8')
        .replace(/^\uFEFF/, ''),
    );
  } catch (e) {
    throw new HarFormatError(`${file} is not a HAR file (${(e as Error).message})`);
  }
  const entries = isObj(har) && isObj(har.log) ? har.log.entries : undefined;
  if (!Array.isArray(entries)) throw new HarFormatError(`${file} is not a HAR file (no log.entries)`);
  return entries;
}

/** One entry as replay answers it; undefined for one without a usable request or answer (skipped). */
async function recordedOf(e: unknown, index: number): Promise<Recorded | undefined> {
  const req = isObj(e) ? e.request : undefined;
  const res = isObj(e) ? e.response : undefined;
  const status = isObj(res) ? Number(res.status) : NaN;
  if (!isObj(req) || !isObj(res) || typeof req.method !== 'string' || typeof req.url !== 'string' || !(status >= 100 && status <= 999)) {
    return undefined;
  }
  let match: Match;
  try {
    match = await requestMatch(req, req.method, req.url);
  } catch {
    return undefined;
  }
  const content = isObj(res.content) ? res.content : {};
  return {
    index,
    match,
    status,
    statusText: str(res.statusText) ?? '',
    headers: replayedHeaders(res, content),
    body: bodyBytes(str(content.text), str(content.encoding)),
    time: Number(isObj(e) ? e.time : 0) || 0,
  };
}

/** What a request to replay must match: its method, URL and body (postData's text or params). */
function requestMatch(req: Obj, method: string, url: string): Promise<Match> {
  const post = isObj(req.postData) ? req.postData : undefined;
  const reqHeaders = nameValues(req.headers);
  const contentType = str(post?.mimeType) || reqHeaders.find(([k]) => k.toLowerCase() === 'content-type')?.[1] || undefined;
  return matchOf({
    method,
    url,
    contentType,
    body: bodyBytes(str(post?.text), str(post?._encoding) ?? str(post?.encoding)),
    params: Array.isArray(post?.params)
      ? (post.params as Obj[])
          .filter((p) => typeof p.name === 'string')
          .map((p) => ({ name: p.name as string, value: str(p.value), fileName: str(p.fileName) }))
      : undefined,
  });
}

/** The answer's headers as replayed: without those of the recorded transfer, with its content type. */
function replayedHeaders(res: Obj, content: Obj): Array<[string, string]> {
  const headers = nameValues(res.headers).filter(([k]) => !k.startsWith(':') && !NOT_REPLAYED.has(k.toLowerCase()));
  const mimeType = str(content.mimeType);
  if (mimeType && !headers.some(([k]) => k.toLowerCase() === 'content-type')) headers.push(['content-type', mimeType]);
  return headers;
}
