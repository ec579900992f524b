import { availableParallelism } from 'node:os';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Worker } from 'node:worker_threads';
import { upstreamBadResponse } from '../http/errors.js';
import type { PresenceEra } from '../presence/convert.js';
import { readPresenceAnswer, type PresenceColumns } from '../presence/columns.js';
import { BadAnswer, readUserList, userColumnsFromRows, type EmailTable, type UserColumns } from '../upstream/large-answers.js';
import type { PresenceRead, Reply, Task } from './parse-worker-thread.js';

/**
 * B7: the large upstream answers (user list, full presence) are parsed and converted off the
 * main thread, by a small pool of worker threads that take the body bytes and give back compact
 * columns (large-answers.ts). A 35 MB user list would otherwise block every other request for
 * a third of a second. Small answers are read in place: a round trip costs more than they do.
 */

export interface ParsePoolOptions {
  /** Worker threads at most (started on first use, each ending once idle for idleExitMs); 0 reads everything on the main thread. */
  workers: number;
  /** Answers below this many bytes are read on the main thread. */
  inlineBelowBytes: number;
  /** A worker with nothing to read for this long ends, giving its heap back (started again on the next large answer). */
  idleExitMs?: number | undefined;
  /**
   * X2: each worker's young generation, in MiB (its `resourceLimits.maxYoungGenerationSizeMb`).
   * V8's own is 48 MiB, all of it touched between two scavenges of a parse and so resident while
   * the worker lives; a parse's objects are short-lived or moved to the old generation anyway.
   * Absent: V8's own.
   */
  youngGenerationMb?: number | undefined;
}

/**
 * The pool the shim runs: one worker thread fewer than the cores, at least 1 and at most 2 (the
 * main thread keeps a core); answers below 512 KiB read in place, where a round trip to a
 * worker costs more than the read (B7). A worker ends after 10 s without work (a realm's
 * presence is fetched every coalesceMs, 5 s by default, so a busy shim keeps its worker), and
 * its young generation is 8 MiB: a flood of 5,000-user realms peaked 30 MiB lower with it than
 * with V8's 48 (bench/RESULTS.md).
 */
export const PARSE_POOL: ParsePoolOptions = {
  workers: Math.max(1, Math.min(2, availableParallelism() - 1)),
  inlineBelowBytes: 512 * 1024,
  idleExitMs: 10_000,
  youngGenerationMb: 8,
};

/**
 * A worker that read an answer of at least this many bytes ends once idle, giving back the heap
 * the parse took (about four times the answer), rather than holding it as resident memory until
 * the next one.
 */
const RECYCLE_ABOVE_BYTES = 4 * 1024 * 1024;

interface Running {
  worker: Worker;
  waiting: Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>;
  /** Read a large answer: end when idle. */
  recycle: boolean;
  /** Ends the worker once it has been idle for idleExitMs. */
  idleTimer?: NodeJS.Timeout | undefined;
}

/**
 * A worker running the module beside this one: the built JavaScript, or under tsx/vitest the
 * TypeScript source through tsx's loader (registered in the worker before the import).
 */
function startWorker(youngGenerationMb: number | undefined): Worker {
  const resourceLimits = youngGenerationMb === undefined ? {} : { maxYoungGenerationSizeMb: youngGenerationMb };
  const here = import.meta.url;
  if (!here.endsWith('.ts')) return new Worker(new URL('./parse-worker-thread.js', here), { resourceLimits });
  const entry = new URL('./parse-worker-thread.ts', here).href;
  const code = `import('tsx/esm/api').then(({ register }) => { register(); return import(${JSON.stringify(entry)}); });`;
  return new Worker(code, { eval: true, resourceLimits });
}

/** Bytes to move to a worker: the buffer itself when it is all of its memory, else a copy (a view into a larger one cannot be moved). */
const movable = (bytes: Buffer): Uint8Array =>
  bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : (Uint8Array.prototype.slice.call(bytes) as Uint8Array);

const toShimError = (message: string, bad: boolean) => (bad ? upstreamBadResponse(message) : new Error(`parse worker: ${message}`));

export class ParsePool {
  private readonly size: number;
  private readonly inlineBelow: number;
  private readonly idleExitMs: number | undefined;
  private readonly youngGenerationMb: number | undefined;
  private readonly running: Running[] = [];
  private nextId = 1;
  private closed = false;

  constructor(o: ParsePoolOptions) {
    this.size = o.workers;
    this.inlineBelow = o.inlineBelowBytes;
    this.idleExitMs = o.idleExitMs;
    this.youngGenerationMb = o.youngGenerationMb;
  }

  /** The resource limits of the worker threads running now, one per thread. */
  workerLimits(): Array<Worker['resourceLimits']> {
    return this.running.map((r) => r.worker.resourceLimits);
  }

  /** `GET /users` bytes → columns. The bytes are moved to the worker: the caller must not reuse them. */
  userList(bytes: Buffer): Promise<UserColumns> {
    if (!this.offload(bytes.length)) return inline(() => readUserList(bytes));
    const sent = movable(bytes);
    return this.run({ id: 0, kind: 'users', bytes: sent }, [sent.buffer as ArrayBuffer], bytes.length) as Promise<UserColumns>;
  }

  /** A user list shared as rows (another replica's) → columns. */
  userRows(rows: string): Promise<UserColumns> {
    if (!this.offload(rows.length)) return inline(() => userColumnsFromRows(rows));
    return this.run({ id: 0, kind: 'rows', rows }, [], rows.length) as Promise<UserColumns>;
  }

  /**
   * Presence answer bytes → columns (see readPresenceAnswer); legacy keys resolved through
   * `table` where given. The bytes come back with the columns: moved to the worker and back
   * rather than copied (B7: copying a 20 MB answer into the message was a 30 ms block), so the
   * caller must use the returned buffer, not the one it passed, which may be emptied.
   */
  async presenceAnswer(
    bytes: Buffer,
    era: PresenceEra | undefined,
    table?: EmailTable,
  ): Promise<{ columns: PresenceColumns; bytes: Buffer }> {
    if (!this.offload(bytes.length)) return { columns: await inline(() => readPresenceAnswer(bytes, era, table)), bytes };
    const sent = movable(bytes);
    const read = (await this.run(
      { id: 0, kind: 'presence', bytes: sent, era, table },
      [sent.buffer as ArrayBuffer],
      bytes.length,
    )) as PresenceRead;
    return { columns: read.columns, bytes: Buffer.from(read.bytes.buffer, read.bytes.byteOffset, read.bytes.byteLength) };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const r of this.running) clearTimeout(r.idleTimer);
    await Promise.all(this.running.splice(0).map((r) => r.worker.terminate()));
  }

  private offload(bytes: number): boolean {
    return this.size > 0 && !this.closed && bytes >= this.inlineBelow;
  }

  private run(task: Task, transfer: ArrayBuffer[], bytes: number): Promise<unknown> {
    const r = this.pick();
    if (bytes >= RECYCLE_ABOVE_BYTES) r.recycle = true;
    clearTimeout(r.idleTimer);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      r.waiting.set(id, { resolve, reject });
      r.worker.ref();
      r.worker.postMessage({ ...task, id }, transfer);
    });
  }

  /** A worker that has just finished its work: ended now after a large answer, else once idle for idleExitMs. */
  private idle(r: Running): void {
    r.worker.unref();
    if (r.recycle) return this.retire(r);
    if (this.idleExitMs === undefined) return;
    r.idleTimer = setTimeout(() => this.retire(r), this.idleExitMs);
    r.idleTimer.unref();
  }

  private retire(r: Running): void {
    clearTimeout(r.idleTimer);
    const i = this.running.indexOf(r);
    if (i >= 0) this.running.splice(i, 1);
    void r.worker.terminate();
  }

  /** The least busy worker, or a new one while there are fewer than `size`. */
  private pick(): Running {
    let best = this.running[0];
    for (const r of this.running) if (r.waiting.size < best!.waiting.size) best = r;
    if (best && (best.waiting.size === 0 || this.running.length >= this.size)) return best;
    const worker = startWorker(this.youngGenerationMb);
    worker.unref();
    const r: Running = { worker, waiting: new Map(), recycle: false };
    const fail = (e: Error) => {
      clearTimeout(r.idleTimer);
      const i = this.running.indexOf(r);
      if (i >= 0) this.running.splice(i, 1);
      for (const w of r.waiting.values()) w.reject(e);
      r.waiting.clear();
    };
    worker.on('message', (m: Reply) => {
      const w = r.waiting.get(m.id);
      if (!w) return;
      r.waiting.delete(m.id);
      if (r.waiting.size === 0) this.idle(r);
      if (m.ok) w.resolve(m.result);
      else w.reject(toShimError(m.message, m.bad));
    });
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`parse worker exited with code ${code}`)));
    this.running.push(r);
    return r;
  }
}

/** A read on this thread, after a turn of the event loop (the caller's step before it ends first). */
async function inline<T>(read: () => T): Promise<T> {
  await nextTurn();
  try {
    return read();
  } catch (e) {
    if (e instanceof BadAnswer) throw upstreamBadResponse(e.message);
    throw e;
  }
}

let shared: ParsePool | undefined;
/** One pool for the process where none is passed in (tests, tools). */
export function defaultParsePool(): ParsePool {
  shared ??= new ParsePool(PARSE_POOL);
  return shared;
}
