import { createReadStream } from 'node:fs';
import { type FileHandle, open, rename, unlink } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { Logger } from '../observability/logger.js';
import { VERSION } from '../version.js';
import type { HarEntry } from './har.js';
import type { Redactor } from './redact.js';

/**
 * X8: a HAR file written as a stream, valid at every flush. The head (`{"log":{…,"entries":[`)
 * is written once; each flush writes the entries that arrived since, followed by the closing
 * `]}}`, over the previous closing, so the file on disk is a complete HAR after every flush
 * (within `flushMs`) and at close. Memory holds only the entries of one flush interval, and
 * at most about PENDING_FLUSH_CHARS of their bodies, whatever the length of the recording; a
 * body goes to the file in pieces, never as one JSON string.
 *
 * Entries are written in start order within a flush (HAR viewers and replay expect it); an
 * exchange that ends after later-started ones were flushed (a long poll) comes after them.
 *
 * H1: a secret learnt after an entry reached the file (an api_key in a later answer) is
 * replaced there at close, by one streaming pass over the file (the file's entries keep one
 * JSON string per line, so a line-by-line scrub sees every value whole).
 */

interface HarWriterOptions {
  file: string;
  redactor: Redactor;
  log: Logger;
  /** Written as `log.comment`. */
  comment?: string | undefined;
  /** Longest wait before new entries reach the file: HAR_FLUSH_MS but in tests. */
  flushMs: number;
}

interface Pending {
  at: number;
  /** The entry, scrubbed at `generation` of the redactor; serialised only when written. */
  entry: HarEntry;
  /** The response's text as UTF-8 bytes, when the entry leaves `content.text` out for them. */
  responseText: Buffer | undefined;
  generation: number;
}

/** New entries reach the file within a second (README, "Record and replay"). */
export const HAR_FLUSH_MS = 1000;
const ENTRY_INDENT = '      ';
const TAIL = '\n    ]\n  }\n}\n';

const URL_LINE = /^\s*"url": "/;

/** Indents every line; only \n ends one (a /^/m would also indent after U+2028 inside a string). */
const indent = (json: string, pad: string) => pad + json.replace(/\n/g, `\n${pad}`);

/** Pending entries holding more body text than this are written at once, not at the timer. */
const PENDING_FLUSH_CHARS = 4 * 1024 * 1024;
/** Text is handed to the file in pieces of about this many characters. */
const PIECE_CHARS = 64 * 1024;

/**
 * X8: a body's text stands for itself in the entry's JSON as this mark, and is written after
 * it, escaped piece by piece, so a multi-MB body is never copied into one JSON string (and then
 * an indented one, a joined batch, a Buffer of it). NUL cannot be in a header; a body's or a
 * parameter's text that holds the mark anyway is caught by the count of marks (whole JSON then).
 */
const BODY_MARK = '\u0000har-body\u0000';
const BODY_MARK_JSON = JSON.stringify(BODY_MARK).slice(1, -1);

/** The body texts of an entry, in the order JSON.stringify meets them, with marks in their place. */
function markBodies(entry: HarEntry, responseText: Buffer | undefined): { marked: HarEntry; bodies: Array<string | Buffer> } {
  const bodies: Array<string | Buffer> = [];
  const mark = (text: string | Buffer | undefined) => {
    if (text === undefined) return text;
    bodies.push(text);
    return BODY_MARK;
  };
  const { request, response } = entry;
  const postData = request.postData && { ...request.postData, text: mark(request.postData.text) };
  const content = { ...response.content, text: mark(responseText ?? response.content.text) };
  const marked: HarEntry = {
    ...entry,
    request: postData ? { ...request, postData } : request,
    response: { ...response, content },
  };
  return { marked, bodies };
}

/** A string as the inside of a JSON string, in pieces; a surrogate pair is never split. */
function* escapedPieces(text: string): Generator<string> {
  for (let i = 0; i < text.length; ) {
    let end = Math.min(i + PIECE_CHARS, text.length);
    const last = text.charCodeAt(end - 1);
    if (end < text.length && last >= 0xd800 && last <= 0xdbff) end++;
    yield JSON.stringify(text.slice(i, end)).slice(1, -1);
    i = end;
  }
}

/** Bytes JSON.stringify writes for each byte it escapes (`"`, `\\`, controls): at most 6 (`\\u001f`). */
const LONGEST_ESCAPE = 6;
/** By byte: how many bytes its escape takes (0: written as it is), and those bytes, LONGEST_ESCAPE per byte. */
const ESCAPE_LENGTH = new Uint8Array(256);
const ESCAPE_BYTES = new Uint8Array(256 * LONGEST_ESCAPE);
for (let b = 0; b < 0x80; b++) {
  const escaped = JSON.stringify(String.fromCharCode(b)).slice(1, -1);
  if (escaped.length === 1) continue;
  ESCAPE_LENGTH[b] = escaped.length;
  ESCAPE_BYTES.set(Buffer.from(escaped), b * LONGEST_ESCAPE);
}

/**
 * An entry as the file holds it (indented JSON, one line per value), in pieces: strings, and
 * bodies as bytes, which FileOut escapes as it copies them (valid UTF-8: byte for byte what
 * JSON.stringify writes for their text, which escapes only `"`, `\\`, controls and lone
 * surrogates, which UTF-8 cannot hold).
 */
function* entryPieces(entry: HarEntry, responseText: Buffer | undefined): Generator<string | { escape: Buffer }> {
  const { marked, bodies } = markBodies(entry, responseText);
  const parts = indent(JSON.stringify(marked, null, 2), ENTRY_INDENT).split(BODY_MARK_JSON);
  if (parts.length !== bodies.length + 1) {
    const whole = responseText
      ? { ...entry, response: { ...entry.response, content: { ...entry.response.content, text: responseText.toString('utf8') } } }
      : entry;
    yield indent(JSON.stringify(whole, null, 2), ENTRY_INDENT);
    return;
  }
  for (const [i, part] of parts.entries()) {
    yield part;
    const body = bodies[i];
    if (typeof body === 'string') yield* escapedPieces(body);
    else if (body) yield { escape: body };
  }
}

/** Characters of body text an entry holds (what its pending copy costs, roughly). */
const bodyChars = (p: Pick<Pending, 'entry' | 'responseText'>) =>
  (p.entry.request.postData?.text?.length ?? 0) + (p.entry.response.content.text?.length ?? 0) + (p.responseText?.length ?? 0);

/** Bytes of the writer's one output buffer (X8: a flush allocates nothing per piece). */
const OUT_BYTES = 4 * PIECE_CHARS;

/**
 * Positional writes from `at` on, through one buffer the writer keeps: text and bodies are
 * copied (bodies escaped) into it and written when it fills, so recording a body makes no
 * garbage of its size (X8: escaped pieces and their concatenation were about twice each body,
 * Buffers that stay resident until a collection).
 */
class FileOut {
  private size = 0;
  constructor(
    private readonly fh: FileHandle,
    public at: number,
    private readonly buf: Buffer,
  ) {}
  async put(text: string | Buffer): Promise<void> {
    const length = typeof text === 'string' ? Buffer.byteLength(text) : text.length;
    if (length > this.buf.length - this.size) await this.drain();
    if (length > this.buf.length) {
      const bytes = typeof text === 'string' ? Buffer.from(text) : text;
      await this.fh.write(bytes, 0, bytes.length, this.at);
      this.at += bytes.length;
      return;
    }
    this.size += typeof text === 'string' ? this.buf.write(text, this.size) : text.copy(this.buf, this.size);
  }
  /** Valid UTF-8 as the inside of a JSON string (see entryPieces), escaped into the buffer. */
  async putEscaped(bytes: Buffer): Promise<void> {
    const out = this.buf;
    const last = out.length - LONGEST_ESCAPE;
    let j = 0;
    while (j < bytes.length) {
      if (this.size > last) await this.drain();
      let n = this.size;
      const end = bytes.length;
      for (; j < end && n <= last; j++) {
        const b = bytes[j]!;
        const length = ESCAPE_LENGTH[b]!;
        if (length === 0) out[n++] = b;
        else for (let k = b * LONGEST_ESCAPE, e = k + length; k < e; k++) out[n++] = ESCAPE_BYTES[k]!;
      }
      this.size = n;
    }
  }
  async drain(): Promise<void> {
    if (this.size === 0) return;
    const size = this.size;
    this.size = 0;
    await this.fh.write(this.buf, 0, size, this.at);
    this.at += size;
  }
}

/**
 * The one place a recording file is opened (created or truncated here). Whether an existing
 * recording may be replaced is decided by the caller before this.
 */
function openRecording(file: string): Promise<FileHandle> {
  return open(file, 'w');
}

export class HarWriter {
  private pending: Pending[] = [];
  private pendingChars = 0;
  private fh: FileHandle | undefined;
  /** Where the closing `]}}` starts: the next entries are written from here. */
  private tailAt = 0;
  private written = 0;
  /** The redactor's generation when the first entry reached the file. */
  private firstGeneration: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();
  private queued: Promise<void> | undefined;
  private closed = false;
  /** FileOut's buffer, one per writer (writes never overlap: one runs at a time). */
  private out: Buffer | undefined;

  constructor(private readonly o: HarWriterOptions) {}

  /** Entries added so far (written or about to be). */
  get count(): number {
    return this.written + this.pending.length;
  }

  /** `responseText`: the response's text as UTF-8 bytes, for an entry that leaves it out. */
  add(entry: HarEntry, startedAt: number, responseText?: Buffer): void {
    const p: Pending = { at: startedAt, entry, responseText, generation: this.o.redactor.generation };
    this.pending.push(p);
    this.pendingChars += bodyChars(p);
    // X8: what waits for the file is bounded in bytes too, not only by the interval.
    if (this.pendingChars > PENDING_FLUSH_CHARS) void this.flushLogged();
    else this.timer ??= setTimeout(() => void this.flushLogged(), this.o.flushMs);
  }

  /** Writes what is pending soon after any write in progress; rejects when it cannot be written. */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    // At most one write runs and one waits: everything added by then is in the waiting one.
    if (!this.queued) {
      const next = this.writing.then(() => {
        this.queued = undefined;
        return this.write();
      });
      this.queued = next;
      this.writing = next.catch(() => {}); // the caller of flush() gets the error; the chain goes on
    }
    return this.queued;
  }

  async close(): Promise<void> {
    if (this.closed) return this.writing;
    this.closed = true;
    await this.flush();
    const fh = this.fh;
    this.fh = undefined;
    await fh?.close();
    if (this.firstGeneration !== undefined && this.firstGeneration !== this.o.redactor.generation) await this.rescrub();
  }

  private async flushLogged(): Promise<void> {
    try {
      await this.flush();
    } catch (e) {
      this.o.log.error({ err: e }, 'cannot write the HAR recording; will retry');
    }
  }

  private head(): string {
    return [
      '{',
      '  "log": {',
      '    "version": "1.2",',
      `    "creator": ${JSON.stringify({ name: 'zulip-compat-shim', version: VERSION })},`,
      ...(this.o.comment ? [`    "comment": ${JSON.stringify(this.o.comment)},`] : []),
      '    "entries": [',
    ].join('\n');
  }

  private async write(): Promise<void> {
    if (!this.fh) {
      this.fh = await openRecording(this.o.file);
      const head = Buffer.from(this.head());
      await this.fh.write(head, 0, head.length, 0);
      this.tailAt = head.length;
    }
    const batch = this.pending;
    this.pending = [];
    this.pendingChars = 0;
    batch.sort((a, b) => a.at - b.at);
    // Every entry of the batch is scrubbed at this generation or a later one.
    const generation = this.o.redactor.generation;
    try {
      this.out ??= Buffer.allocUnsafe(OUT_BYTES);
      const out = new FileOut(this.fh, this.tailAt, this.out);
      await this.writeEntries(batch, out);
      await out.drain();
      const end = out.at;
      await out.put(TAIL);
      await out.drain();
      await this.fh.sync();
      this.tailAt = end;
    } catch (e) {
      this.pending = batch.concat(this.pending); // kept for the next try
      this.pendingChars = this.pending.reduce((n, p) => n + bodyChars(p), 0);
      throw e;
    }
    if (batch.length > 0) this.firstGeneration ??= generation;
    this.written += batch.length;
  }

  private async writeEntries(batch: Pending[], out: FileOut): Promise<void> {
    const redactor = this.o.redactor;
    for (const [i, p] of batch.entries()) {
      const { entry, responseText } = p.generation === redactor.generation ? p : this.rescrubbed(p);
      await out.put(this.written === 0 && i === 0 ? '\n' : ',\n');
      for (const piece of entryPieces(entry, responseText))
        await (typeof piece === 'string' ? out.put(piece) : out.putEscaped(piece.escape));
    }
  }

  /** H1: a secret learnt after this entry was made is replaced in it too (its bytes read as text only if they hold one). */
  private rescrubbed(p: Pending): Pick<Pending, 'entry' | 'responseText'> {
    const redactor = this.o.redactor;
    const entry = redactor.scrubDeep(p.entry);
    if (!p.responseText || !redactor.mayHold(p.responseText)) return { entry, responseText: p.responseText };
    const text = redactor.scrub(p.responseText.toString('utf8'));
    return { entry: { ...entry, response: { ...entry.response, content: { ...entry.response.content, text } } }, responseText: undefined };
  }

  /** One streaming pass over the file with every secret known now; atomic by rename. */
  private async rescrub(): Promise<void> {
    const tmp = `${this.o.file}.${process.pid}.tmp`;
    const out = await open(tmp, 'w');
    try {
      const lines = createInterface({ input: createReadStream(this.o.file, 'utf8'), crlfDelay: Infinity });
      let chunk = '';
      for await (const line of lines) {
        let scrubbed = this.o.redactor.scrub(line);
        // A request URL stays a valid RFC 3986 URL: placeholders in it are percent-encoded.
        if (scrubbed !== line && URL_LINE.test(line)) scrubbed = scrubbed.replace(/\[(redacted-\d+)\]/g, '%5B$1%5D');
        chunk += `${scrubbed}\n`;
        if (chunk.length > 64 * 1024) {
          await out.write(chunk);
          chunk = '';
        }
      }
      await out.write(chunk);
      await out.sync();
    } catch (e) {
      await out.close();
      await unlink(tmp).catch(() => {}); // the recording itself is intact; only the copy goes
      throw e;
    }
    await out.close();
    await rename(tmp, this.o.file);
  }
}
