import { createHash } from 'node:crypto';
import busboy from 'busboy';

/** Form bodies as parameter lists, for recording (postData.params) and for matching (H2). */

export interface FormPart {
  name: string;
  /** A field's value; for a file, its content when it is UTF-8 text. */
  value: string;
  fileName?: string;
  contentType?: string;
  /** For a file: SHA-256 of its content, so matching compares files without holding them. */
  digest?: string;
}

type MimeKind = 'none' | 'form' | 'multipart' | 'json' | 'other';

export function mimeKind(contentType: string | undefined): MimeKind {
  const m = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  if (m === '') return 'none';
  if (m === 'application/x-www-form-urlencoded') return 'form';
  if (m === 'multipart/form-data') return 'multipart';
  if (m.endsWith('/json') || m.endsWith('+json')) return 'json';
  return 'other';
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Parses a multipart/form-data body; undefined when it cannot be read. A content type
 * without its boundary (some exporters drop it) takes the boundary from the body's first line.
 */
export function parseMultipart(contentType: string, body: Buffer): Promise<FormPart[] | undefined> {
  let type = contentType;
  if (!/boundary=/i.test(type)) {
    const m = /^--([^\r\n]+)\r\n/.exec(body.subarray(0, 256).toString('latin1'));
    if (!m) return Promise.resolve(undefined);
    type = `multipart/form-data; boundary=${m[1]}`;
  }
  return new Promise((resolve) => {
    let bb: busboy.Busboy;
    try {
      bb = busboy({ headers: { 'content-type': type }, defParamCharset: 'utf8', limits: { fieldSize: 64 * 1024 * 1024 } });
    } catch {
      resolve(undefined);
      return;
    }
    const parts: FormPart[] = [];
    let pending = 0;
    let closed = false;
    const finish = () => {
      if (closed && pending === 0) resolve(parts);
    };
    bb.on('field', (name, value) => parts.push({ name, value }));
    bb.on('file', (name, stream, info) => {
      pending++;
      const part: FormPart = { name, value: '', fileName: info.filename, contentType: info.mimeType };
      parts.push(part);
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const content = Buffer.concat(chunks);
        part.digest = sha256(content);
        try {
          part.value = utf8.decode(content);
        } catch {
          part.value = '';
        }
        pending--;
        finish();
      });
    });
    bb.on('error', () => resolve(undefined));
    bb.on('close', () => {
      closed = true;
      finish();
    });
    bb.end(body);
  });
}

/** Decoded pairs of a form-urlencoded text, in order. */
export function parseForm(text: string): Array<[string, string]> {
  return [...new URLSearchParams(text)];
}
