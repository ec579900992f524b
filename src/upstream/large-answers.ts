/**
 * Pure readers of the two upstream answers that grow with a realm (B7: at 100k users on 2.1
 * the user list is 35 MB and the legacy presence answer 19.7 MB). Each takes the raw body bytes
 * and returns compact columns (typed arrays, one joined string) instead of an object per user,
 * so it can run in a worker thread (parse-worker.ts) and its result cross to the main thread
 * cheaply. Also run on the main thread for small answers.
 */

/** The answer is not what the endpoint sends (E2: UPSTREAM_BAD_RESPONSE). */
export class BadAnswer extends Error {
  override name = 'BadAnswer';
}

/** The fields of a `GET /users` member the shim reads (every era's `GET /users` rows; docs/behaviour.md, U1–U3). */
export interface Member {
  user_id: number;
  email: string;
  full_name?: string;
  is_bot: boolean;
  is_active: boolean;
  is_admin: boolean;
  is_guest: boolean;
  /** Feature level 8+. */
  is_owner?: boolean;
  /** Feature level 59+. */
  role?: number;
  /** IANA name or "". */
  timezone: string;
  /** ISO 8601 with offset, as the upstream wrote it. */
  date_joined: string;
  /** Feature level 6+. */
  avatar_version?: number;
  /** Only where the upstream shows it to the caller (admins, or always from feature level 163). */
  delivery_email?: string;
  /** Bots only (V5). */
  bot_type?: number | null;
  /** Bots only: the owner's id (feature level 1+), null for none. */
  bot_owner_id?: number | null;
  /** Bots only, 2.1: the owner's email, null for none. */
  bot_owner?: string | null;
}

const str = (v: unknown): v is string => typeof v === 'string';
const bool = (v: unknown): v is boolean => typeof v === 'boolean';
const int = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);

const boolOr = (v: unknown, otherwise: boolean): boolean => (bool(v) ? v : otherwise);
const strOr = (v: unknown, otherwise: string): string => (str(v) ? v : otherwise);

/** Reads one member; undefined when the row lacks what every era sends. Pure. */
export function memberOf(row: unknown): Member | undefined {
  if (!row || typeof row !== 'object') return undefined;
  const r = row as Record<string, unknown>;
  if (!int(r.user_id) || !str(r.email)) return undefined;
  const m: Member = {
    user_id: r.user_id,
    email: r.email,
    is_bot: boolOr(r.is_bot, false),
    is_active: boolOr(r.is_active, true),
    is_admin: boolOr(r.is_admin, false),
    is_guest: boolOr(r.is_guest, false),
    timezone: strOr(r.timezone, ''),
    date_joined: strOr(r.date_joined, ''),
  };
  withLaterFields(m, r);
  if (m.is_bot) withBotFields(m, r);
  return m;
}

/** The fields not every era or caller gets, where the row has them. */
function withLaterFields(m: Member, r: Record<string, unknown>): void {
  if (str(r.full_name)) m.full_name = r.full_name;
  if (bool(r.is_owner)) m.is_owner = r.is_owner;
  if (int(r.role)) m.role = r.role;
  if (int(r.avatar_version)) m.avatar_version = r.avatar_version;
  if (str(r.delivery_email)) m.delivery_email = r.delivery_email;
}

/** A bot's fields (V5), null being a value of theirs. */
function withBotFields(m: Member, r: Record<string, unknown>): void {
  if (int(r.bot_type) || r.bot_type === null) m.bot_type = r.bot_type;
  if (int(r.bot_owner_id) || r.bot_owner_id === null) m.bot_owner_id = r.bot_owner_id;
  if (str(r.bot_owner) || r.bot_owner === null) m.bot_owner = r.bot_owner;
}

type Packed = [number, string, string | null, boolean, boolean, boolean, boolean, string, string, ...Array<unknown>];

/** A member as one short JSON array (no repeated keys): about half the bytes of the object. */
export function packMember(m: Member): string {
  return JSON.stringify([
    m.user_id,
    m.email,
    m.full_name ?? null,
    m.is_bot,
    m.is_active,
    m.is_admin,
    m.is_guest,
    m.timezone,
    m.date_joined,
    m.is_owner ?? null,
    m.role ?? null,
    m.avatar_version ?? null,
    m.delivery_email ?? null,
    // Bot fields: 0 where absent (null is a value of theirs).
    m.bot_type === undefined ? 0 : m.bot_type,
    m.bot_owner_id === undefined ? 0 : m.bot_owner_id,
    m.bot_owner === undefined ? 0 : m.bot_owner,
  ]);
}

export function unpackMember(json: string): Member {
  const [
    user_id,
    email,
    full_name,
    is_bot,
    is_active,
    is_admin,
    is_guest,
    timezone,
    date_joined,
    is_owner,
    role,
    avatar_version,
    delivery,
    botType = 0,
    botOwnerId = 0,
    botOwner = 0,
  ] = JSON.parse(json) as Packed;
  const m: Member = { user_id, email, is_bot, is_active, is_admin, is_guest, timezone, date_joined };
  if (full_name !== null) m.full_name = full_name;
  if (is_owner !== null) m.is_owner = is_owner as boolean;
  if (role !== null) m.role = role as number;
  if (avatar_version !== null) m.avatar_version = avatar_version as number;
  if (delivery !== null) m.delivery_email = delivery as string;
  if (botType !== 0) m.bot_type = botType as number | null;
  if (botOwnerId !== 0) m.bot_owner_id = botOwnerId as number | null;
  if (botOwner !== 0) m.bot_owner = botOwner as string | null;
  return m;
}

/** The user list in columns, members ordered by user id. */
export interface UserColumns {
  /** User ids, ascending. */
  ids: Int32Array;
  /** date_joined in whole seconds (NaN where it does not parse), by position. */
  joined: Float64Array;
  /** 1 where the member is active, by position (X10: an email's one active user wins). */
  active: Uint8Array;
  /** Emails, by position, joined by "\n". */
  emails: string;
  /** packMember rows, by position, joined by "\n" (JSON text never holds a raw newline). */
  rows: string;
  /** Where each row starts in `rows`, and one past the end (length + 1) last. */
  rowStarts: Int32Array;
  /** No character of `rows` (nor so of `emails`) is past U+00FF: V8 keeps both at one byte a character (X2). */
  oneByte: boolean;
}

/** A character V8 cannot keep in a one-byte string. */
const TWO_BYTE = /[\u0100-\uffff]/;

function columnsOf(members: Member[]): UserColumns {
  members.sort((a, b) => a.user_id - b.user_id);
  const n = members.length;
  const ids = new Int32Array(n);
  const joined = new Float64Array(n);
  const active = new Uint8Array(n);
  const emails: string[] = new Array<string>(n);
  const rows: string[] = new Array<string>(n);
  let oneByte = true;
  for (let i = 0; i < n; i++) {
    const m = members[i]!;
    ids[i] = m.user_id;
    const t = Date.parse(m.date_joined);
    joined[i] = Number.isFinite(t) ? Math.floor(t / 1000) : Number.NaN;
    active[i] = m.is_active ? 1 : 0;
    emails[i] = m.email;
    rows[i] = packMember(m);
    if (oneByte && TWO_BYTE.test(rows[i]!)) oneByte = false;
  }
  const rowStarts = new Int32Array(n + 1);
  let at = 0;
  for (let i = 0; i < n; i++) {
    rowStarts[i] = at;
    at += rows[i]!.length + 1;
  }
  rowStarts[n] = at;
  return { ids, joined, active, emails: emails.join('\n'), rows: rows.join('\n'), rowStarts, oneByte };
}

/** Members of a parsed `GET /users` answer (`{"members": [...]}`); rows that cannot be read are left out. */
function membersOf(answer: Record<string, unknown>): Member[] {
  if (!Array.isArray(answer.members)) throw new BadAnswer('GET /users has no members list');
  const out: Member[] = [];
  for (const row of answer.members) {
    const m = memberOf(row);
    // An email with a line break cannot be a Zulip address, and would split the columns.
    if (m && !m.email.includes('\n')) out.push(m);
  }
  return out;
}

/** A parsed user list in columns. */
export function userColumnsOf(answer: Record<string, unknown>): UserColumns {
  return columnsOf(membersOf(answer));
}

/** The columns again from their rows (a list shared by another replica as rows only). */
export function userColumnsFromRows(rows: string): UserColumns {
  return columnsOf(rows === '' ? [] : rows.split('\n').map(unpackMember));
}

export function parseObject(bytes: Uint8Array): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8'));
  } catch {
    throw new BadAnswer('body is not JSON');
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) throw new BadAnswer('body is not a JSON object');
  return v as Record<string, unknown>;
}

/** `GET /users` bytes → columns. */
export function readUserList(bytes: Uint8Array): UserColumns {
  return userColumnsOf(parseObject(bytes));
}

/**
 * The realm's email → id map as the user directory decided it (X10), to resolve legacy keys
 * where the answer is read: each email (joined by "\n") and the id it stands for, by position.
 */
export interface EmailTable {
  emails: string;
  ids: Int32Array;
}

/** Users handled per step on the main thread (B7: each step stays far below 50 ms). */
export const STEP = 5_000;

/**
 * The "\n"-joined parts of `joined`, one at a time, without splitting the whole string at once
 * (B7: 100k strings made in one go is a long block).
 */
export function* lines(joined: string): Generator<string> {
  if (joined === '') return;
  let at = 0;
  for (;;) {
    const end = joined.indexOf('\n', at);
    if (end < 0) {
      yield joined.slice(at);
      return;
    }
    yield joined.slice(at, end);
    at = end + 1;
  }
}
