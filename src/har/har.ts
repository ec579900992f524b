/**
 * The parts of HAR 1.2 (Jan Odvarko's spec, http://www.softwareishard.com/blog/har-12-spec/) the shim writes
 * and reads. Files from other producers may carry more; replay ignores what it does not use.
 */

export interface HarNameValue {
  name: string;
  value: string;
}

export interface HarParam {
  name: string;
  value?: string;
  fileName?: string;
  contentType?: string;
}

export interface HarPostData {
  mimeType: string;
  params?: HarParam[];
  text?: string;
  /** Custom field: `text` is base64 because the body is not UTF-8 (an upload, say). */
  _encoding?: 'base64';
}

interface HarRequest {
  method: string;
  url: string;
  httpVersion: string;
  cookies: HarNameValue[];
  headers: HarNameValue[];
  queryString: HarNameValue[];
  postData?: HarPostData;
  headersSize: number;
  bodySize: number;
}

export interface HarContent {
  size: number;
  compression?: number;
  mimeType: string;
  /** The decoded body (after Content-Encoding), base64 when `encoding` says so. */
  text?: string;
  encoding?: string;
  comment?: string;
}

interface HarResponse {
  status: number;
  statusText: string;
  httpVersion: string;
  cookies: HarNameValue[];
  headers: HarNameValue[];
  content: HarContent;
  redirectURL: string;
  headersSize: number;
  bodySize: number;
}

interface HarTimings {
  blocked?: number;
  dns?: number;
  connect?: number;
  send: number;
  wait: number;
  receive: number;
  ssl?: number;
}

export interface HarEntry {
  startedDateTime: string;
  time: number;
  request: HarRequest;
  response: HarResponse;
  cache: Record<string, never>;
  timings: HarTimings;
  comment?: string;
}

/** Mime types whose bodies are kept as text when they are valid UTF-8. */
export function isTextual(mimeType: string): boolean {
  const m = mimeType.split(';')[0]!.trim().toLowerCase();
  return (
    m === '' ||
    m.startsWith('text/') ||
    m.endsWith('/json') ||
    m.endsWith('+json') ||
    m.endsWith('/javascript') ||
    m.endsWith('/xml') ||
    m.endsWith('+xml') ||
    m === 'application/x-www-form-urlencoded' ||
    m.startsWith('multipart/')
  );
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** A body as HAR text: UTF-8 where it is text, base64 otherwise. */
export function bodyText(body: Buffer, mimeType: string): { text: string; base64: boolean } {
  if (body.length === 0) return { text: '', base64: false };
  if (isTextual(mimeType)) {
    try {
      return { text: utf8.decode(body), base64: false };
    } catch {
      // not UTF-8 after all: fall through to base64
    }
  }
  return { text: body.toString('base64'), base64: true };
}

/** The bytes of a HAR `text`, base64 or UTF-8. */
export function bodyBytes(text: string | undefined, encoding: string | undefined): Buffer {
  if (!text) return Buffer.alloc(0);
  return encoding === 'base64' ? Buffer.from(text, 'base64') : Buffer.from(text, 'utf8');
}
