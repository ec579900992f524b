import type { LedgerState, RaisedRange } from '../presence/ledger.js';
import { LedgerTable } from '../presence/ledger-table.js';

/**
 * A realm ledger as bytes, for the shared store (S2: one value per realm, ~10 bytes per user).
 *
 * Packed (format 3), when every number fits: users sorted by id, each as varints relative to
 * what is already known (the previous user id, the snapshot time it was seen at, the realm's
 * lastId), with the distinct `seenAt` times in a table. Anything that does not fit (fractional
 * timestamps, ids beyond 2^51, -0) is written in the wide format (4): every number as a float64.
 * Both decode to exactly the state encoded; test/store-codec.test.ts checks it for any state.
 *
 * A ledger whose counter was raised past ids it never issued (ledger.ts I6) carries those
 * ranges after its merges, in format 5 (packed) or 6 (wide); one without any is written in 3 or
 * 4 as before, so a replica of an earlier release reads it.
 *
 * Formats 1 and 2 were the same without `completeAt`; a value in a format this code does not
 * write is unreadable, and the store replaces it with a new epoch (clients resync in full, P5).
 */

const PACKED = 3;
const WIDE = 4;
/** PACKED or WIDE plus this: the ledger's raised ranges follow its merges. */
const WITH_RAISED = 2;
const ZIGZAG_MAX = 2 ** 51;

export class CodecError extends Error {
  override name = 'CodecError';
}

class Writer {
  buf: Buffer;
  pos = 0;

  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }

  u8(v: number): void {
    this.buf[this.pos++] = v;
  }

  f64(v: number): void {
    this.pos = this.buf.writeDoubleLE(v, this.pos);
  }

  /** Unsigned varint of a safe integer (arithmetic, not bit operators: values reach 2^53). */
  uint(v: number): void {
    while (v >= 128) {
      this.buf[this.pos++] = (v % 128) + 128;
      v = Math.floor(v / 128);
    }
    this.buf[this.pos++] = v;
  }

  sint(v: number): void {
    this.uint(v >= 0 ? v * 2 : -v * 2 - 1);
  }

  done(): Buffer {
    return this.buf.subarray(0, this.pos);
  }
}

class Reader {
  pos = 0;

  constructor(private readonly buf: Buffer) {}

  private need(n: number): void {
    if (this.pos + n > this.buf.length) throw new CodecError('truncated ledger');
  }

  u8(): number {
    this.need(1);
    return this.buf[this.pos++]!;
  }

  f64(): number {
    this.need(8);
    const v = this.buf.readDoubleLE(this.pos);
    this.pos += 8;
    return v;
  }

  uint(): number {
    let v = 0;
    let scale = 1;
    for (;;) {
      const b = this.u8();
      v += (b % 128) * scale;
      if (b < 128) break;
      scale *= 128;
      if (scale > 2 ** 56) throw new CodecError('varint too long');
    }
    return v;
  }

  sint(): number {
    const z = this.uint();
    return z % 2 === 0 ? z / 2 : -(z + 1) / 2;
  }

  end(): void {
    if (this.pos !== this.buf.length) throw new CodecError('trailing bytes after ledger');
  }
}

const isInt = (v: number) => Number.isSafeInteger(v) && !Object.is(v, -0);
const fitsZigzag = (v: number) => isInt(v) && Math.abs(v) < ZIGZAG_MAX;

function header(w: Writer, format: number, s: LedgerState): void {
  w.u8(s.raised.length > 0 ? format + WITH_RAISED : format);
  w.f64(s.epoch);
  w.f64(s.lastId);
  w.f64(s.completeAt);
  w.uint(s.merges.length);
  for (const [ts, id] of s.merges) {
    w.f64(ts);
    w.f64(id);
  }
  if (s.raised.length === 0) return;
  w.uint(s.raised.length);
  for (const [after, upTo, atMs] of s.raised) {
    w.f64(after);
    w.f64(upTo);
    w.f64(atMs);
  }
}

/** Bytes of the header (`header`), at most. */
const headerBytes = (s: LedgerState) => 72 + s.merges.length * 16 + s.raised.length * 24;

function encodePacked(s: LedgerState): Buffer | undefined {
  const entries = [...s.users];
  let sorted = true;
  for (let i = 0; i < entries.length; i++) {
    const id = entries[i]![0];
    if (!isInt(id) || id < 0) return undefined;
    if (i > 0 && id < entries[i - 1]![0]) sorted = false;
  }
  // A decoded ledger is in id order already, and a merge appends new users: sort only if needed.
  if (!sorted) entries.sort((a, b) => a[0] - b[0]);
  const seenIndex = new Map<number, number>();
  for (const [, e] of entries) {
    if (Object.is(e.seenAt, -0)) return undefined; // a Map key cannot tell -0 from 0
    if (!seenIndex.has(e.seenAt)) seenIndex.set(e.seenAt, seenIndex.size);
  }
  const w = new Writer(headerBytes(s) + seenIndex.size * 8 + entries.length * 40);
  header(w, PACKED, s);
  w.uint(seenIndex.size);
  for (const t of seenIndex.keys()) w.f64(t);
  w.uint(entries.length);
  let prev = 0;
  for (const [id, e] of entries) {
    const sinceActive = Math.floor(e.seenAt) - e.active;
    const idleAfter = e.idle - e.active;
    const age = s.lastId - e.changedAt;
    if (!fitsZigzag(sinceActive) || !fitsZigzag(idleAfter) || !isInt(age) || age < 0) return undefined;
    if (!isInt(e.active) || !isInt(e.idle) || !isInt(e.changedAt)) return undefined;
    w.uint(id - prev);
    w.uint(seenIndex.get(e.seenAt)! * 2 + (e.present ? 1 : 0));
    w.sint(sinceActive);
    w.sint(idleAfter);
    w.uint(age);
    prev = id;
  }
  return w.done();
}

function encodeWide(s: LedgerState): Buffer {
  const w = new Writer(headerBytes(s) + s.users.size * 41);
  header(w, WIDE, s);
  w.uint(s.users.size);
  for (const [id, e] of s.users) {
    w.f64(id);
    w.u8(e.present ? 1 : 0);
    w.f64(e.active);
    w.f64(e.idle);
    w.f64(e.seenAt);
    w.f64(e.changedAt);
  }
  return w.done();
}

export function encodeLedger(s: LedgerState): Buffer {
  return encodePacked(s) ?? encodeWide(s);
}

/** Throws CodecError for bytes that are not a ledger this module wrote. */
export function decodeLedger(buf: Buffer): LedgerState {
  const r = new Reader(buf);
  const written = r.u8();
  const format = written > WIDE ? written - WITH_RAISED : written;
  if (format !== PACKED && format !== WIDE) throw new CodecError(`unknown ledger format ${written}`);
  const epoch = r.f64();
  const lastId = r.f64();
  const completeAt = r.f64();
  const merges: Array<readonly [number, number]> = [];
  for (let n = r.uint(); n > 0; n--) merges.push([r.f64(), r.f64()] as const);
  const raised: RaisedRange[] = [];
  if (written > WIDE) for (let n = r.uint(); n > 0; n--) raised.push([r.f64(), r.f64(), r.f64()] as const);
  const users = LedgerTable.empty().edit();
  if (format === PACKED) {
    const seen: number[] = [];
    for (let n = r.uint(); n > 0; n--) seen.push(r.f64());
    let id = 0;
    for (let n = r.uint(); n > 0; n--) {
      id += r.uint();
      const flags = r.uint();
      const seenAt = seen[Math.floor(flags / 2)];
      if (seenAt === undefined) throw new CodecError('seenAt index out of range');
      const active = Math.floor(seenAt) - r.sint();
      const idle = active + r.sint();
      users.set(id, { active, idle, seenAt, changedAt: lastId - r.uint(), present: flags % 2 === 1 });
    }
  } else {
    for (let n = r.uint(); n > 0; n--) {
      const userId = r.f64();
      const present = r.u8() === 1;
      users.set(userId, { active: r.f64(), idle: r.f64(), seenAt: r.f64(), changedAt: r.f64(), present });
    }
  }
  r.end();
  return { epoch, lastId, users: users.done(), raised, merges, completeAt };
}
