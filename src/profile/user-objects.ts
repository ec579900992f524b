import { setImmediate as nextTurn } from 'node:timers/promises';
import { emailPicks } from '../upstream/user-directory.js';
import { backfillInPlace, type Added, type Lookups, type UserObjectChange } from '../changes/index.js';

/**
 * V1, V4: lists of user objects (GET /users' `members`, register's `realm_users`,
 * `realm_non_active_users`, `cross_realm_bots`) filled by the same version changes as the own
 * profile, without an upstream call per user: everything a change needs for another user is in
 * the object itself or in the lists at hand. Long lists yield to other requests every
 * USERS_PER_TURN objects, and are serialised in steps too (V4: no event-loop block above 50 ms).
 */

/** Objects backfilled (or serialised) between two yields to the event loop. */
export const USERS_PER_TURN = 500;

type Row = Record<string, unknown>;

export const isRow = (v: unknown): v is Row => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The caller's own object in a list, when the shim knows which one it is (register). */
export interface OwnRow {
  userId: number;
  /** The caller's real address, as the upstream told the caller itself. */
  deliveryEmail?: string | undefined;
}

/**
 * An email → user id lookup over the given lists, built on first use (2.1 bot owners). An email
 * several rows share maps by X10's one rule (emailPicks: the one active user, else none); a row
 * without `is_active` counts as active, as in the user directory. Such an email, when looked up,
 * is recorded in `shared` with the id it stood for (X10: the caller logs it).
 */
export function emailIndex(
  lists: ReadonlyArray<readonly unknown[]>,
  shared?: Map<string, number | undefined>,
): (email: string) => number | undefined {
  let index: Map<string, number> | undefined;
  const sharedKeys = new Set<string>();
  return (email) => {
    const wanted = email.toLowerCase();
    if (!index) {
      const rowsOf = new Map<string, Row[]>();
      for (const list of lists) {
        for (const row of list) {
          if (!isRow(row) || typeof row.email !== 'string' || typeof row.user_id !== 'number') continue;
          const key = row.email.toLowerCase();
          const rows = rowsOf.get(key);
          if (rows) rows.push(row);
          else rowsOf.set(key, [row]);
        }
      }
      index = new Map();
      for (const [key, rows] of rowsOf) {
        if (rows.length > 1) sharedKeys.add(key);
        const at =
          rows.length === 1
            ? 0
            : emailPicks(
                { active: Uint8Array.from(rows, (r) => (r.is_active === false ? 0 : 1)) },
                rows.map((_, i) => i),
              );
        if (at >= 0) index.set(key, rows[at]!.user_id as number);
      }
    }
    const id = index.get(wanted);
    if (sharedKeys.has(wanted)) shared?.set(wanted, id);
    return id;
  };
}

/**
 * Fills every object of `list` in place with the changes (U1: only missing fields), recording
 * what was added in `into`. `idOfEmail` resolves 2.1 bot owners; `own` marks the caller's row;
 * `systemBots`: the list is register's `cross_realm_bots` (V5).
 */
export async function backfillList(
  list: unknown[],
  changes: readonly UserObjectChange[],
  into: Added,
  context: { idOfEmail: (email: string) => number | undefined; own?: OwnRow | undefined; systemBots?: boolean | undefined },
): Promise<void> {
  if (changes.length === 0) return;
  const other: Lookups = { subject: 'other', idOfEmail: context.idOfEmail, systemBot: context.systemBots };
  const own: Lookups = { subject: 'own', idOfEmail: context.idOfEmail, deliveryEmail: context.own?.deliveryEmail };
  // V2: the caller's row is filled as its own only with its real address known; else the rule
  // for others applies (null where hidden), never the own profile's fallback (the API email).
  const ownId = context.own?.deliveryEmail !== undefined ? context.own.userId : undefined;
  for (let i = 0; i < list.length; i++) {
    if (i > 0 && i % USERS_PER_TURN === 0) await nextTurn();
    const row = list[i];
    if (!isRow(row)) continue;
    backfillInPlace(row, changes, ownId !== undefined && row.user_id === ownId ? own : other, into);
  }
}

/**
 * JSON of an answer whose big lists (`keys`) are serialised USERS_PER_TURN items at a time,
 * yielding between steps. Those keys come last; JSON objects have no order (R2: same meaning).
 */
export async function stringifyInSteps(body: Record<string, unknown>, keys: readonly string[]): Promise<Buffer> {
  // No prototype: an upstream key `__proto__` (JSON.parse makes it an own key) stays a key.
  const rest: Record<string, unknown> = Object.create(null);
  const lists: Array<[string, unknown[]]> = [];
  for (const [k, v] of Object.entries(body)) {
    if (keys.includes(k) && Array.isArray(v)) lists.push([k, v]);
    else rest[k] = v;
  }
  const head = JSON.stringify(rest);
  if (lists.length === 0) return Buffer.from(head);
  const parts: string[] = [head.slice(0, -1)];
  let first = head === '{}';
  for (const [key, list] of lists) {
    parts.push(`${first ? '' : ','}${JSON.stringify(key)}:[`);
    first = false;
    for (let i = 0; i < list.length; i += USERS_PER_TURN) {
      if (i > 0) {
        parts.push(',');
        await nextTurn();
      }
      // A hole or undefined in an array is `null` in JSON, as JSON.stringify of the whole would write.
      parts.push(JSON.stringify(list.slice(i, i + USERS_PER_TURN)).slice(1, -1));
    }
    parts.push(']');
  }
  parts.push('}');
  return Buffer.from(parts.join(''));
}

/** Characters of JSON scanned between two yields when locating a list. */
const CHARS_PER_TURN = 64 * 1024;

const QUOTE = 34;
const BACKSLASH = 92;
const OPEN_BRACE = 123;
const CLOSE_BRACE = 125;
const OPEN_BRACKET = 91;
const CLOSE_BRACKET = 93;
const COMMA = 44;
const COLON = 58;

/** Is the quote at `at` escaped (an odd run of backslashes before it)? */
function escaped(text: string, at: number): boolean {
  let n = 0;
  for (let i = at - 1; i >= 0 && text.charCodeAt(i) === BACKSLASH; i--) n++;
  return n % 2 === 1;
}

/** Is the string whose closing quote is at `end` a key (a colon next, after any whitespace)? */
function isKey(text: string, end: number): boolean {
  let i = end + 1;
  while (i < text.length && /\s/.test(text[i]!)) i++;
  return text.charCodeAt(i) === COLON;
}

/** A string's value from its text between the quotes (escapes read as JSON reads them). */
function unescaped(raw: string): string | undefined {
  if (!raw.includes('\\')) return raw;
  try {
    return JSON.parse(`"${raw}"`) as string;
  } catch {
    return undefined;
  }
}

/** Where a list is: its brackets and the commas between its items. */
interface LocatedList {
  open: number;
  close: number;
  commas: number[];
}

/** locateList's state as it reads the text. */
interface ListScan {
  readonly text: string;
  readonly key: string;
  depth: number;
  /** The top-level key just read, and where its closing quote is. */
  lastKey: { name: string | undefined; end: number } | undefined;
  /** The list's `[` while inside it, else -1. */
  open: number;
  found: LocatedList | undefined;
  readonly commas: number[];
}

/** A step's answer when the text is not what it seems: the whole parse says so as JSON.parse would. */
const NOT_AS_IT_SEEMS = -1;

/**
 * Where the top-level array `key` of a JSON object text is: its brackets and the commas
 * between its items. Undefined when the text has no such array, when `key` comes again later
 * at the top level (JSON.parse keeps the last one), or when the text is not what it seems.
 */
async function locateList(text: string, key: string): Promise<LocatedList | undefined> {
  const scan: ListScan = { text, key, depth: 0, lastKey: undefined, open: -1, found: undefined, commas: [] };
  let nextTurnAt = CHARS_PER_TURN;
  for (let i = 0; i < text.length; i++) {
    if (i >= nextTurnAt) {
      nextTurnAt += CHARS_PER_TURN;
      await nextTurn();
    }
    i = scanStep(scan, i);
    if (i === NOT_AS_IT_SEEMS) return undefined;
  }
  return scan.found;
}

/** Reads the character at i: where the scan goes on after (a string's closing quote), or NOT_AS_IT_SEEMS. */
function scanStep(scan: ListScan, i: number): number {
  const c = scan.text.charCodeAt(i);
  if (c === QUOTE) return stringEnd(scan, i);
  if (c === OPEN_BRACE || c === OPEN_BRACKET) {
    if (c === OPEN_BRACKET && isTheList(scan, i)) scan.open = i;
    scan.depth++;
  } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
    scan.depth--;
    if (scan.open >= 0 && scan.depth === 1) {
      // The list closed by a `}`: not JSON (every other bracket is checked by the parses of
      // the rest and of the items).
      if (c !== CLOSE_BRACKET) return NOT_AS_IT_SEEMS;
      scan.found = { open: scan.open, close: i, commas: scan.commas };
      scan.open = -1;
    }
  } else if (c === COMMA && scan.open >= 0 && scan.depth === 2) scan.commas.push(i);
  return i;
}

/** The closing quote of the string opening at i; a top-level key is remembered. */
function stringEnd(scan: ListScan, i: number): number {
  const { text } = scan;
  let end = text.indexOf('"', i + 1);
  while (end > 0 && escaped(text, end)) end = text.indexOf('"', end + 1);
  if (end < 0) return NOT_AS_IT_SEEMS;
  if (scan.depth === 1 && scan.open < 0) {
    scan.lastKey = { name: unescaped(text.slice(i + 1, end)), end };
    // The same key again after the list: JSON.parse keeps that one.
    if (scan.found && scan.lastKey.name === scan.key && isKey(text, end)) return NOT_AS_IT_SEEMS;
  }
  return end;
}

/** Is the `[` at i the array right after `"key":` at the top level (the first one)? */
function isTheList(scan: ListScan, i: number): boolean {
  const { lastKey } = scan;
  return (
    scan.depth === 1 && scan.open < 0 && !scan.found && lastKey?.name === scan.key && /^\s*:\s*$/.test(scan.text.slice(lastKey.end + 1, i))
  );
}

/**
 * Parses a JSON object whose array `key` may be long (GET /users' `members`) without one
 * long block (V4): the array's place is found in steps, then its items are parsed
 * USERS_PER_TURN at a time. Anything unexpected falls back to one JSON.parse of the whole,
 * which throws as it would have; the result is JSON.parse's (property tests in
 * test/user-objects.test.ts).
 *
 * Kept because it pays (bench/list-parse.ts, 2-core machine under load): a 2.1 user list of
 * 10,000 users (3.3 MB) blocks other requests 4–8 ms instead of JSON.parse's 16–38 ms, one of
 * 100,000 (33 MB) 52–76 ms instead of 271–306 ms, for about twice the CPU. The parse pool is no
 * way around it: it returns columns, and a whole object posted back from a worker is decoded
 * on this thread in one block as long as JSON.parse's (20–23 ms and 270–443 ms).
 */
export async function parseWithListInSteps(
  body: Buffer,
  key: string,
  parseWhole: (body: Buffer) => Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const text = body.toString('utf8');
  const at = await locateList(text, key);
  if (!at) return parseWhole(body);
  let rest: unknown;
  try {
    rest = JSON.parse(`${text.slice(0, at.open)}[]${text.slice(at.close + 1)}`);
  } catch {
    return parseWhole(body);
  }
  if (!isRow(rest)) return parseWhole(body);
  const list: unknown[] = [];
  const bounds = [at.open, ...at.commas, at.close];
  if (at.commas.length > 0 || text.slice(at.open + 1, at.close).trim() !== '') {
    for (let k = 0; k < bounds.length - 1; k += USERS_PER_TURN) {
      if (k > 0) await nextTurn();
      const from = bounds[k]! + 1;
      const to = bounds[Math.min(k + USERS_PER_TURN, bounds.length - 1)]!;
      try {
        for (const item of JSON.parse(`[${text.slice(from, to)}]`) as unknown[]) list.push(item);
      } catch {
        return parseWhole(body);
      }
    }
  }
  rest[key] = list;
  return rest;
}
