import { open, rename, unlink } from 'node:fs/promises';
import type { Logger } from '../observability/logger.js';
import { VERSION } from '../version.js';
import type { HarEntry } from './har.js';
import type { Redactor } from './redact.js';

/**
 * Keeps a HAR file valid at all times: the whole file is rewritten to a temporary file,
 * synced and renamed over the old one (atomic on POSIX), shortly after new entries arrive
 * and on close. A crash loses at most the entries of the last flush interval.
 *
 * The interval is `flushMs` (1 s), stretched to ten times the last write's duration, so a long
 * recording never spends more than a tenth of its time rewriting itself.
 */

export interface HarWriterOptions {
  file: string;
  redactor: Redactor;
  log: Logger;
  /** Written as `log.comment`. */
  comment?: string;
  /** Longest wait before new entries reach the file (default 1000 ms). */
  flushMs?: number;
}

interface Kept {
  at: number;
  /** The entry as indented JSON (only the text is kept), scrubbed at `generation` of the redactor. */
  json: string;
  generation: number;
}

const indent = (json: string, pad: string) => json.replace(/^/gm, pad);

export class HarWriter {
  private readonly kept: Kept[] = [];
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();
  private queued: Promise<void> | undefined;
  private lastWriteMs = 0;
  private closed = false;

  constructor(private readonly o: HarWriterOptions) {}

  get count(): number {
    return this.kept.length;
  }

  /** Adds an entry in the order of its start time (HAR viewers and replay expect that). */
  add(entry: HarEntry, startedAt: number): void {
    const kept: Kept = {
      at: startedAt,
      json: indent(JSON.stringify(entry, null, 2), '      '),
      generation: this.o.redactor.generation,
    };
    let i = this.kept.length;
    while (i > 0 && this.kept[i - 1]!.at > startedAt) i--;
    this.kept.splice(i, 0, kept);
    this.timer ??= setTimeout(() => void this.flushLogged(), Math.max(this.o.flushMs ?? 1000, this.lastWriteMs * 10));
  }

  /** Writes the file soon after any write in progress; rejects when it cannot be written. */
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
      this.writing = next.catch(() => {});
    }
    return this.queued;
  }

  async close(): Promise<void> {
    if (this.closed) return this.writing;
    this.closed = true;
    await this.flush();
  }

  private async flushLogged(): Promise<void> {
    try {
      await this.flush();
    } catch (e) {
      this.o.log.error(
        { err: { code: (e as NodeJS.ErrnoException).code, message: (e as Error).message } },
        'cannot write the HAR recording; will retry',
      );
    }
  }

  private text(): string {
    const redactor = this.o.redactor;
    // H1: a secret learnt after an entry was kept (an api_key in a later answer) is
    // replaced in that entry too.
    for (const k of this.kept) {
      if (k.generation === redactor.generation) continue;
      const entry = redactor.scrubDeep(JSON.parse(k.json) as HarEntry);
      k.json = indent(JSON.stringify(entry, null, 2), '      ');
      k.generation = redactor.generation;
    }
    const head = [
      '{',
      '  "log": {',
      '    "version": "1.2",',
      `    "creator": ${JSON.stringify({ name: 'zulip-compat-shim', version: VERSION })},`,
      ...(this.o.comment ? [`    "comment": ${JSON.stringify(this.o.comment)},`] : []),
      '    "entries": [',
    ].join('\n');
    const entries = this.kept.map((k) => k.json).join(',\n');
    return `${head}${entries ? `\n${entries}` : ''}\n    ]\n  }\n}\n`;
  }

  private async write(): Promise<void> {
    const started = performance.now();
    const tmp = `${this.o.file}.${process.pid}.tmp`;
    const fh = await open(tmp, 'w');
    try {
      await fh.writeFile(this.text());
      await fh.sync();
    } catch (e) {
      await fh.close();
      await unlink(tmp).catch(() => {});
      throw e;
    }
    await fh.close();
    await rename(tmp, this.o.file);
    this.lastWriteMs = performance.now() - started;
  }
}
