import { isUtf8 } from 'node:buffer';
import zlib from 'node:zlib';
import { bodyText, isTextual, type HarContent, type HarEntry, type HarNameValue, type HarPostData } from './har.js';
import { mimeKind, parseForm, parseMultipart } from './form.js';
import type { Redactor } from './redact.js';

/** One upstream exchange as the recorder saw it, turned into a redacted HAR entry (H1). */
export interface ExchangeRecord {
  /** The upstream's URL (origin, and a path prefix if it has one). */
  upstream: string;
  startedAt: number;
  method: string;
  /** Path and query as sent upstream. */
  url: string;
  httpVersion: string;
  /** Node's raw header list: name, value, name, value, … */
  requestHeaders: string[];
  /** Undefined when past the recorder's size limit (the entry's comment says so). */
  requestBody: Buffer | undefined;
  requestSize: number;
  status: number;
  statusText: string;
  responseHttpVersion: string;
  responseHeaders: string[];
  /** The body as it came over the wire (possibly Content-Encoded); undefined when too large. */
  responseBody: Buffer | undefined;
  responseSize: number;
  /** Milliseconds: request received, waiting for the upstream, response received. */
  send: number;
  wait: number;
  receive: number;
}

const ms = (n: number) => Math.max(0, Math.round(n * 1000) / 1000);

function headerList(raw: string[], redactor: Redactor): HarNameValue[] {
  const out: HarNameValue[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) out.push({ name: raw[i]!, value: redactor.header(raw[i]!, raw[i + 1]!) });
  return out;
}

function headerValue(raw: string[], name: string): string | undefined {
  for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) return raw[i + 1];
  return undefined;
}

/** HAR content.text is the decoded body: undo gzip/deflate/br, or say why not. */
function decodeContent(body: Buffer, encoding: string | undefined): { body: Buffer; failed?: string } {
  const codings = (encoding ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s && s !== 'identity');
  let out = body;
  try {
    for (const c of codings.reverse()) {
      if (c === 'gzip' || c === 'x-gzip') out = zlib.gunzipSync(out);
      else if (c === 'deflate') out = zlib.inflateSync(out);
      else if (c === 'br') out = zlib.brotliDecompressSync(out);
      else return { body, failed: `unknown content-encoding ${c}` };
    }
  } catch {
    return { body, failed: `content-encoding ${encoding} could not be decoded` };
  }
  return { body: out };
}

async function postDataOf(record: ExchangeRecord, body: Buffer, redactor: Redactor): Promise<HarPostData | undefined> {
  if (body.length === 0) return undefined;
  const mimeType = headerValue(record.requestHeaders, 'content-type') ?? '';
  const { text, base64 } = bodyText(body, mimeType);
  switch (mimeKind(mimeType)) {
    case 'form':
      if (base64) break;
      return {
        mimeType,
        text: redactor.form(text),
        params: redactor.pairs(parseForm(text).map(([name, value]) => ({ name, value }))),
      };
    case 'multipart': {
      const parts = (await parseMultipart(mimeType, body)) ?? [];
      const fields = parts.filter((p) => p.fileName === undefined).map((p) => [p.name, p.value] as const);
      const params = redactor.pairs(
        parts.map((p) =>
          p.fileName === undefined
            ? { name: p.name, value: p.value }
            : { name: p.name, fileName: p.fileName, contentType: p.contentType ?? '' },
        ),
      );
      // Secret fields are replaced in the body itself; a binary body is worked on byte for byte.
      if (!base64) return { mimeType, text: redactor.multipart(text, fields), params };
      const bytes = Buffer.from(redactor.multipart(body.toString('latin1'), fields), 'latin1');
      return { mimeType, text: bytes.toString('base64'), _encoding: 'base64', params };
    }
    case 'json':
      if (base64) break;
      return { mimeType, text: redactor.json(text) };
  }
  return base64 ? { mimeType, text, _encoding: 'base64' } : { mimeType, text };
}

/**
 * A HAR entry and, when its response text is written from the bytes as they came (X8: a
 * valid UTF-8 text body that may hold no secret, never decoded into one string here), those
 * bytes: the entry's `content.text` is then left out and the writer puts them in its place.
 */
export interface RecordedEntry {
  entry: HarEntry;
  responseText?: Buffer;
}

function responseContent(record: ExchangeRecord, redactor: Redactor, comments: string[]): { content: HarContent; bytes?: Buffer } {
  const mimeType = headerValue(record.responseHeaders, 'content-type') ?? '';
  if (!record.responseBody) {
    comments.push('response body too large: not recorded');
    return { content: { size: -1, mimeType } };
  }
  const decoded = decodeContent(record.responseBody, headerValue(record.responseHeaders, 'content-encoding'));
  if (decoded.failed) comments.push(decoded.failed);
  const size = {
    size: decoded.body.length,
    ...(decoded.body.length !== record.responseBody.length ? { compression: record.responseBody.length - decoded.body.length } : {}),
  };
  if (!decoded.failed && decoded.body.length > 0 && isTextual(mimeType) && isUtf8(decoded.body) && !redactor.mayHold(decoded.body)) {
    return { content: { ...size, mimeType }, bytes: decoded.body };
  }
  const { text, base64 } = bodyText(decoded.body, decoded.failed ? 'application/octet-stream' : mimeType);
  return {
    content: {
      ...size,
      mimeType,
      text: !base64 && mimeKind(mimeType) === 'json' ? redactor.json(text) : text,
      ...(base64 ? { encoding: 'base64' } : {}),
    },
  };
}

export async function toHarEntry(record: ExchangeRecord, redactor: Redactor): Promise<RecordedEntry> {
  const q = record.url.indexOf('?');
  const path = q < 0 ? record.url : record.url.slice(0, q);
  const query = q < 0 ? '' : record.url.slice(q + 1);
  const comments: string[] = [];

  const postData = record.requestBody ? await postDataOf(record, record.requestBody, redactor) : undefined;
  if (!record.requestBody) comments.push('request body too large: not recorded');
  const { content, bytes } = responseContent(record, redactor, comments);

  const entry: HarEntry = {
    startedDateTime: new Date(record.startedAt).toISOString(),
    time: ms(record.send + record.wait + record.receive),
    request: {
      method: record.method,
      url: `${record.upstream}${path}${q < 0 ? '' : `?${redactor.form(query)}`}`,
      httpVersion: `HTTP/${record.httpVersion}`,
      cookies: [],
      headers: headerList(record.requestHeaders, redactor),
      queryString: redactor.pairs(parseForm(query).map(([name, value]) => ({ name, value }))),
      ...(postData ? { postData } : {}),
      headersSize: -1,
      bodySize: record.requestSize,
    },
    response: {
      status: record.status,
      statusText: record.statusText,
      httpVersion: `HTTP/${record.responseHttpVersion}`,
      cookies: [],
      headers: headerList(record.responseHeaders, redactor),
      content,
      redirectURL: headerValue(record.responseHeaders, 'location') ?? '',
      headersSize: -1,
      bodySize: record.responseSize,
    },
    cache: {},
    timings: { send: ms(record.send), wait: ms(record.wait), receive: ms(record.receive) },
    ...(comments.length ? { comment: comments.join('; ') } : {}),
  };
  return { entry: redactor.scrubDeep(entry), ...(bytes ? { responseText: bytes } : {}) };
}
