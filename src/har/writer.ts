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
 * (within `flushMs`) and at close. Memory holds only the entries of one flush interval,
 * whatever the length of the recording.
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
  /** The entry as indented JSON, scrubbed at `generation` of the redactor. */
  json: string;
  generation: number;
}

/** New entries reach the file within a second (README, "Record and replay"). */
export const HAR_FLUSH_MS = 1000;
const ENTRY_INDENT = '      ';
const TAIL = '\n    ]\n  }\n}\n';

const URL_LINE = /^\s*"url": "/;

const indent = (json: string, pad: string) => json.replace(/^/gm, pad);

/**
 * The one place a recording file is opened (created or truncated here). Whether an existing
 * recording may be replaced is decided by the caller before this.
 */
function openRecording(file: string): Promise<FileHandle> {
  return open(file, 'w');
}

export class HarWriter {
  private pending: Pending[] = [];
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

  constructor(private readonly o: HarWriterOptions) {}

  /** Entries added so far (written or about to be). */
  get count(): number {
    return this.written + this.pending.length;
  }

  add(entry: HarEntry, startedAt: number): void {
    this.pending.push({
      at: startedAt,
      json: indent(JSON.stringify(entry, null, 2), ENTRY_INDENT),
      generation: this.o.redactor.generation,
    });
    this.timer ??= setTimeout(() => void this.flushLogged(), this.o.flushMs);
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
    batch.sort((a, b) => a.at - b.at);
    const redactor = this.o.redactor;
    let text = '';
    for (const p of batch) {
      // H1: a secret learnt after this entry was made is replaced in it too.
      const json =
        p.generation === redactor.generation
          ? p.json
          : indent(JSON.stringify(redactor.scrubDeep(JSON.parse(p.json) as HarEntry), null, 2), ENTRY_INDENT);
      text += `${this.written === 0 && text === '' ? '\n' : ',\n'}${json}`;
    }
    if (batch.length > 0) this.firstGeneration ??= redactor.generation;
    const body = Buffer.from(text);
    const out = Buffer.concat([body, Buffer.from(TAIL)]);
    try {
      await this.fh.write(out, 0, out.length, this.tailAt);
      await this.fh.sync();
    } catch (e) {
      this.pending = batch.concat(this.pending); // kept for the next try
      throw e;
    }
    this.tailAt += body.length;
    this.written += batch.length;
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
