import { setImmediate as nextTurn } from 'node:timers/promises';
import { BadAnswer, lines, parseObject, STEP, type EmailTable } from '../upstream/large-answers.js';
import { ColumnMap } from './column-map.js';
import { legacyUserToModern, oldSlimToModern, type Converted, type PresenceEra, type UserLookup } from './convert.js';
import type { ModernPresence } from './ledger.js';

/**
 * B7: a full presence answer read into columns (typed arrays, one joined string) instead of an
 * object per user, so it can be read in a worker thread (src/parse/) and cross to the main thread
 * cheaply; and the columns converted to modern entries (P2) on the main thread, in steps.
 */

/**
 * An upstream presence answer in columns: its top-level fields but `presences`, and each
 * convertible user's modern timestamps (P2). `active` is NaN where the era's data has no active
 * time: the reader fills it with the user's date_joined (P2), which the user list knows.
 */
export interface PresenceColumns {
  top: Record<string, unknown>;
  /** Legacy answers read without an email table: the keys (emails), by position, joined by "\n". */
  emails?: string | undefined;
  /**
   * The user ids, by position: slim answers' keys, or legacy keys resolved through the email
   * table, -1 where the table does not know the email (those are in `unknown`, in order).
   */
  ids?: Int32Array | undefined;
  /** Legacy emails the table did not know, in the order of their -1 ids, joined by "\n". */
  unknown?: string | undefined;
  active: Float64Array;
  idle: Float64Array;
  /** Users in the columns; 0 with no conversion asked for. */
  count: number;
  /** Users the answer shows (its keys), converted or not. */
  keys: number;
}

function tableMap(t: EmailTable): Map<string, number> {
  const m = new Map<string, number>();
  let i = 0;
  for (const email of lines(t.emails)) {
    const id = t.ids[i++]!;
    if (id >= 0) m.set(email, id); // -1: an email shared by several, standing for none (X10)
  }
  return m;
}

/**
 * Presence answer bytes → columns. `era` is the format's conversion (convert.ts's table):
 * `legacy` for email-keyed answers of any era, the upstream's era for slim ones; undefined when
 * the answer is not converted (7.0–8.x legacy answers: only its top-level fields are read).
 */
export function readPresenceAnswer(bytes: Uint8Array, era: PresenceEra | undefined, table?: EmailTable): PresenceColumns {
  const { top, entries } = presencesOf(parseObject(bytes));
  if (!era) return { top, active: new Float64Array(0), idle: new Float64Array(0), count: 0, keys: entries.length };
  const active = new Float64Array(entries.length);
  const idle = new Float64Array(entries.length);
  const byEmail = era === 'legacy' && table ? tableMap(table) : undefined;
  const slim = era !== 'legacy';
  const ids = slim || byEmail ? new Int32Array(entries.length) : undefined;
  const emails: string[] = [];
  let n = 0;
  const convert = era === 'legacy' ? legacyUserToModern : oldSlimToModern;
  for (const [key, entry] of entries) {
    if (slim ? !/^\d+$/.test(key) : key.includes('\n')) continue;
    const times = timesOf(convert, entry);
    if (!times) continue;
    active[n] = times.active;
    idle[n] = times.idle;
    if (slim) ids![n] = Number(key);
    else if (byEmail) {
      const id = byEmail.get(key);
      ids![n] = id ?? -1;
      if (id === undefined) emails.push(key);
    } else emails.push(key);
    n++;
  }
  return {
    top,
    emails: slim || byEmail ? undefined : emails.join('\n'),
    unknown: byEmail ? emails.join('\n') : undefined,
    ids: ids?.slice(0, n),
    active: active.slice(0, n),
    idle: idle.slice(0, n),
    count: n,
    keys: entries.length,
  };
}

/** The answer's presences as entries, and its other top-level fields; throws BadAnswer without a presences object. */
function presencesOf(body: Record<string, unknown>): { top: Record<string, unknown>; entries: Array<[string, unknown]> } {
  const { presences, ...top } = body;
  if (!presences || typeof presences !== 'object' || Array.isArray(presences)) {
    throw new BadAnswer('presence answer without a presences object');
  }
  return { top, entries: Object.entries(presences as Record<string, unknown>) };
}

/**
 * One entry's modern times, undefined where it has none. A never-active user's active time is
 * the one thing this thread cannot know: marked NaN.
 */
function timesOf(
  convert: typeof legacyUserToModern | typeof oldSlimToModern,
  entry: unknown,
): { active: number; idle: number } | undefined {
  let joinedAsked = false;
  const p = convert(entry, () => {
    joinedAsked = true;
    return undefined;
  });
  return p && { active: joinedAsked ? Number.NaN : p.active_timestamp, idle: p.idle_timestamp };
}

/**
 * Columns → the modern entries by user id (P2), as convert.ts's toModern gives them: legacy keys
 * through the realm's email → id map, a missing active time from date_joined (or 0).
 */
export async function modernFromColumns(c: PresenceColumns, users: UserLookup): Promise<Converted> {
  const presences = new Map<number, ModernPresence>();
  const unknownEmails: string[] = [];
  const emails = c.emails === undefined ? undefined : lines(c.emails);
  const unknown = lines(c.unknown ?? '');
  for (let i = 0; i < c.count; i++) {
    if (i > 0 && i % STEP === 0) await nextTurn();
    let id: number | undefined = emails ? undefined : c.ids![i]!;
    if (id === undefined || id === -1) {
      // A key the worker could not resolve: through the caller's map (a fresher one, after a refresh).
      const email = (emails ?? unknown).next().value as string;
      id = users.idOf(email);
      if (id === undefined) {
        unknownEmails.push(email);
        continue;
      }
    }
    const idle = c.idle[i]!;
    let active = c.active[i]!;
    if (Number.isNaN(active)) active = Math.min(users.dateJoinedOf(id) ?? 0, idle);
    presences.set(id, { active_timestamp: active, idle_timestamp: Math.max(idle, active) });
  }
  return { presences, unknownEmails };
}

/**
 * X2, B5: a snapshot's modern entries kept compact: three typed columns and an open-addressing
 * index by user id (under 28 bytes a user) in place of a Map of objects (about 90 bytes a user, each
 * timestamp a heap number). Read-only; each read makes the entry object afresh. Iterates in the
 * order the entries were given, as the Map it replaces did. Built in steps (B6).
 */
export class CompactPresences extends ColumnMap<ModernPresence> {
  private constructor(
    protected override readonly ids: Int32Array,
    private readonly active: Float64Array,
    private readonly idle: Float64Array,
    /** Slots of positions + 1 (0: empty), by the id's hash; a power of two, at least 1.5 times the users. */
    private readonly index: Int32Array,
  ) {
    super();
  }

  /**
   * The entries compact, yielding to other requests every STEP users; the map itself where an
   * id is not a 32-bit integer (no Zulip user id is one).
   */
  static async of(entries: ReadonlyMap<number, ModernPresence>): Promise<ReadonlyMap<number, ModernPresence>> {
    const n = entries.size;
    const ids = new Int32Array(n);
    const active = new Float64Array(n);
    const idle = new Float64Array(n);
    let slots = 2;
    while (slots < n + (n >> 1) + 1) slots *= 2;
    const index = new Int32Array(slots);
    let i = 0;
    for (const [id, p] of entries) {
      if ((id | 0) !== id) return entries;
      if (i > 0 && i % STEP === 0) await nextTurn();
      ids[i] = id;
      active[i] = p.active_timestamp;
      idle[i] = p.idle_timestamp;
      let slot = hashOf(id) & (slots - 1);
      while (index[slot] !== 0) slot = (slot + 1) & (slots - 1);
      index[slot] = i + 1;
      i++;
    }
    return new CompactPresences(ids, active, idle, index);
  }

  /** Bytes its columns and index take. */
  get byteLength(): number {
    return this.ids.byteLength + this.active.byteLength + this.idle.byteLength + this.index.byteLength;
  }

  override get [Symbol.toStringTag](): string {
    return 'CompactPresences';
  }

  protected entryAt(i: number): ModernPresence {
    return { active_timestamp: this.active[i]!, idle_timestamp: this.idle[i]! };
  }

  protected position(id: number): number {
    if ((id | 0) !== id) return -1;
    const mask = this.index.length - 1;
    for (let slot = hashOf(id) & mask; ; slot = (slot + 1) & mask) {
      const at = this.index[slot]!;
      if (at === 0) return -1;
      if (this.ids[at - 1] === id) return at - 1;
    }
  }
}

/** Spreads dense ids over the index (Fibonacci hashing). */
const hashOf = (id: number) => Math.imul(id, 0x9e3779b1) >>> 7;

/** X2: the bytes a snapshot's modern entries take: CompactPresences' columns, or a Map's (120 B a user, measured). */
export function presencesBytes(p: ReadonlyMap<number, ModernPresence> | undefined): number {
  if (!p) return 0;
  return p instanceof CompactPresences ? p.byteLength : p.size * 120;
}
