import { setImmediate as nextTurn } from 'node:timers/promises';
import type { MemoryPool } from '../cache/memory-pool.js';
import { isSuccess } from './relay.js';
import { upstreamBadResponse } from '../http/errors.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import { SharedCache, type CacheBackend } from '../cache/shared-cache.js';
import { bytesOf, type Footprint } from '../cache/budgeted.js';
import type { UpstreamClient } from './client.js';
import { fetchLarge } from './large-fetch.js';
import { BadAnswer, STEP, unpackMember, userColumnsOf, type EmailTable, type Member, type UserColumns } from './large-answers.js';
import type { Realm } from './realm.js';
import { apiPrefixFor } from '../http/api-prefix.js';

/**
 * The realm's user directory: one cached, single-flight `GET /api/v1/users` per realm, bounded
 * in bytes (X2), parsed off the main thread and kept compact (B7)
 * (shared by replicas through the store when there is one, S1),
 * used to map emails to user ids (presence) and to read the caller's own row (own profile).
 *
 * The list is whatever the upstream showed the caller whose request loaded it. Before feature
 * level 228 every member of a realm sees the same list; from 228 a guest may see fewer users,
 * so a reader must treat a missing user as "not known", never as "does not exist".
 */

export type { Member } from './large-answers.js';
export { memberOf } from './large-answers.js';

/**
 * X10: the member an email shared by several stands for, by position in the columns: the one
 * active member (presence is only ever reported for active users); none (-1) when that is not
 * exactly one, so no user's presence is attributed to another. The one place an email picks.
 */
export function emailPicks(columns: Pick<UserColumns, 'active'>, positions: readonly number[]): number {
  const active = positions.filter((i) => columns.active[i] === 1);
  return active.length === 1 ? active[0]! : -1;
}

/**
 * A realm's user list, compact (B7): members by user id in columns, their fields as packed JSON
 * rows read back only for the one user asked about, and an email index into the joined emails
 * (X2: typed arrays, about 12 bytes a user, where a Map of email strings took about 65).
 */
export class Directory {
  /** X2: what this directory holds, from its columns. */
  readonly footprint: Footprint;
  /** …in bytes. */
  readonly bytes: number;

  private constructor(
    private readonly columns: UserColumns,
    /** Where each email starts in `columns.emails`, and one past the end (length + 1) last. */
    private readonly emailStarts: Int32Array,
    /** Slots of email positions + 1 (0: empty), by the email's hash: one slot per distinct email. */
    private readonly emailIndex: Int32Array,
    /** The id each email (by position) stands for, after emailPicks; -1 for none. */
    private readonly picked: Int32Array,
    /** X10: emails more than one member of the list has (unmapped unless one is active). */
    readonly ambiguousEmails: ReadonlySet<string>,
    /** When the upstream answered (ms since the epoch), so a reader can tell how fresh it is. */
    readonly fetchedAt: number,
  ) {
    const { ids, joined, active, rowStarts, emails, rows } = columns;
    // X2: the text at the bytes V8 keeps it in (one a character unless a character is past U+00FF).
    this.footprint = {
      fixed: 1024,
      ...(columns.oneByte ? { oneByteStrings: [rows, emails] } : { strings: [rows, emails] }),
      bytes: [ids, joined, active, rowStarts, picked, emailStarts, emailIndex],
    };
    this.bytes = bytesOf(this.footprint);
  }

  /** Builds the email index in steps, yielding to other requests between them. */
  static async of(columns: UserColumns, fetchedAt: number): Promise<Directory> {
    const { emails } = columns;
    const n = columns.ids.length;
    const emailStarts = new Int32Array(n + 1);
    let slots = 2;
    while (slots < n + (n >> 1) + 1) slots *= 2;
    const emailIndex = new Int32Array(slots);
    /** X10: positions of each email more than one member has. */
    const shared = new Map<string, number[]>();
    /** The position each email's index slot names (its first), by position. */
    const first = new Int32Array(n);
    let at = 0;
    for (let i = 0; i < n; i++) {
      if (i > 0 && i % STEP === 0) await nextTurn();
      let end = emails.indexOf('\n', at);
      if (end < 0) end = emails.length;
      emailStarts[i] = at;
      const found = findEmail(emails, emailStarts, emailIndex, at, end);
      if (found.position < 0) {
        emailIndex[found.slot] = i + 1;
        first[i] = i;
      } else {
        first[i] = found.position;
        const email = emails.slice(at, end);
        const group = shared.get(email);
        if (group) group.push(i);
        else shared.set(email, [found.position, i]);
      }
      at = end + 1;
    }
    emailStarts[n] = at;
    const picked = new Int32Array(n);
    for (let i = 0; i < n; i++) picked[i] = columns.ids[first[i]!]!;
    for (const group of shared.values()) {
      const chosen = emailPicks(columns, group);
      for (const i of group) picked[i] = chosen < 0 ? -1 : columns.ids[chosen]!;
    }
    return new Directory(columns, emailStarts, emailIndex, picked, new Set(shared.keys()), fetchedAt);
  }

  /** The email → id map as a table, for reading a legacy answer's keys off the main thread (B7). */
  emailTable(): EmailTable {
    return { emails: this.columns.emails, ids: this.picked };
  }

  /** Members in the list. */
  get size(): number {
    return this.columns.ids.length;
  }

  /** The user id an email stands for (X10: see emailPicks). */
  idOf(email: string): number | undefined {
    const i = findEmail(this.columns.emails, this.emailStarts, this.emailIndex, email).position;
    const id = i < 0 ? -1 : this.picked[i]!;
    return id < 0 ? undefined : id;
  }

  /** The member with this id, read from its row. */
  member(userId: number): Member | undefined {
    const i = this.position(userId);
    if (i < 0) return undefined;
    return unpackMember(this.columns.rows.slice(this.columns.rowStarts[i]!, this.columns.rowStarts[i + 1]! - 1));
  }

  /** date_joined in whole seconds. */
  dateJoinedOf(userId: number): number | undefined {
    const i = this.position(userId);
    const t = i < 0 ? Number.NaN : this.columns.joined[i]!;
    return Number.isNaN(t) ? undefined : t;
  }

  /** Every user id, ascending. */
  userIds(): Iterable<number> {
    return this.columns.ids.values();
  }

  /** What replicas share (S1): the rows, from which the rest is rebuilt. */
  toJson(): string {
    return JSON.stringify({ fetchedAt: this.fetchedAt, rows: this.columns.rows });
  }

  private position(userId: number): number {
    const ids = this.columns.ids;
    let lo = 0;
    let hi = ids.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      const v = ids[mid]!;
      if (v === userId) return mid;
      if (v < userId) lo = mid + 1;
      else hi = mid - 1;
    }
    return -1;
  }
}

/** FNV-1a over a string's UTF-16 code units, from `start` to `end`. */
function emailHash(s: string, start: number, end: number): number {
  let h = 0x811c9dc5;
  for (let i = start; i < end; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/**
 * Where an email is in a directory's index: the position of its first member (-1: none) and the
 * slot that names it, or the free slot it would take. `email` is a string, or its span in `emails`.
 */
function findEmail(
  emails: string,
  starts: Int32Array,
  index: Int32Array,
  email: string | number,
  spanEnd = 0,
): { position: number; slot: number } {
  const [text, from, to] = typeof email === 'string' ? [email, 0, email.length] : [emails, email, spanEnd];
  const length = to - from;
  const mask = index.length - 1;
  for (let slot = emailHash(text, from, to) & mask; ; slot = (slot + 1) & mask) {
    const at = index[slot]!;
    if (at === 0) return { position: -1, slot };
    const start = starts[at - 1]!;
    // The entry's end is where the next email starts, less its "\n" (filled in order while building).
    const end = starts[at]! - 1;
    if (end - start === length && sameText(emails, start, text, from, length)) return { position: at - 1, slot };
  }
}

function sameText(a: string, aFrom: number, b: string, bFrom: number, length: number): boolean {
  for (let k = 0; k < length; k++) if (a.charCodeAt(aFrom + k) !== b.charCodeAt(bFrom + k)) return false;
  return true;
}

/**
 * A list is read again by refresh() at most once per this many ms, so a user the list cannot
 * show (another realm's bot, asked about in every poll) costs one read a second, not one a poll.
 */
export const USER_LIST_MIN_REFRESH_MS = 1_000;

export interface UserDirectoryOptions {
  /** How long a realm's list is used before it is read again. */
  ttlMs: number;
  /** Realms kept in this process at most (least recently used go first). */
  maxEntries: number;
  /** X2: bytes the realms' lists may take in this process (memory.userDirectoriesBytes; see Directory.bytes). */
  maxBytes: number;
  /** X2: the shim's cap over all its budgets (memory.totalBytes; cache/memory-pool.ts). */
  pool?: MemoryPool | undefined;
  /** refresh() re-reads a list only when it is older than this: USER_LIST_MIN_REFRESH_MS but in tests. */
  minRefreshMs: number;
  /** S1: where replicas share the lists (the store's cache backend); absent: this process only. */
  backend?: CacheBackend | undefined;
  /** B7: where large lists are parsed (off the main thread: src/parse/). */
  parser: UserListParser;
  /** B7: the largest list read (memory.largeAnswerBytes). */
  maxAnswerBytes: number;
}

/** B7: reads a user list's bytes (or a stored list's rows) into columns, off the main thread where large. */
export interface UserListParser {
  userList(bytes: Buffer): Promise<UserColumns>;
  userRows(rows: string): Promise<UserColumns>;
}

interface LoadContext {
  realm: Realm;
  headers: Record<string, string>;
}

/** Builds the directory from a parsed `GET /users` answer (`{"members": [...]}`). */
export async function directoryOf(answer: Record<string, unknown>, fetchedAt: number): Promise<Directory> {
  let columns: UserColumns;
  try {
    columns = userColumnsOf(answer);
  } catch (e) {
    throw e instanceof BadAnswer ? upstreamBadResponse(e.message) : e;
  }
  return Directory.of(columns, fetchedAt);
}

/** Whether a once-per-realm log line is due for this realm, marking it logged (bounded, X2). */
function firstFor(logged: Set<string>, realm: Realm): boolean {
  if (logged.has(realm.key)) return false;
  if (logged.size >= 1_000) logged.clear();
  logged.add(realm.key);
  return true;
}

export class UserDirectory {
  private readonly cache: SharedCache<Directory, LoadContext>;
  private readonly minRefreshMs: number;
  private readonly maxBytes: number;
  private readonly refreshing = new Map<string, Promise<Directory>>();
  private readonly parser: UserListParser;
  private readonly maxAnswerBytes: number;
  private tooLargeLogged = false;
  /** Realms whose shared emails were logged already (X10: once). */
  private readonly ambiguityLogged = new Set<string>();
  /** Realms whose bot owners named by a shared email were logged already (X10: once). */
  private readonly ownerAmbiguityLogged = new Set<string>();

  constructor(
    private readonly client: UpstreamClient,
    private readonly log: Logger,
    metrics: Metrics,
    options: UserDirectoryOptions,
  ) {
    this.minRefreshMs = options.minRefreshMs;
    this.maxBytes = options.maxBytes;
    this.parser = options.parser;
    this.maxAnswerBytes = options.maxAnswerBytes;
    this.cache = new SharedCache<Directory, LoadContext>({
      name: 'user_directory',
      ttlMs: options.ttlMs,
      max: options.maxEntries,
      maxBytes: this.maxBytes,
      pool: options.pool?.in('userDirectories'),
      footprint: (d) => d.footprint,
      // B7: an expired list is not read again inside a presence refresh; a user it does not
      // know yet makes refresh() read it at once.
      staleWhileRevalidate: true,
      toJson: (d) => d.toJson(),
      fromJson: async (json) => {
        const { fetchedAt, rows } = JSON.parse(json) as { fetchedAt: number; rows: string };
        if (typeof fetchedAt !== 'number' || typeof rows !== 'string') throw new Error('not a shared user list');
        return Directory.of(await this.parser.userRows(rows), fetchedAt);
      },
      backend: options.backend,
      lookups: metrics.lookups,
      load: (_key, context) => this.load(context),
    });
  }

  /**
   * The realm's directory, loaded with the given caller's headers when not cached (P13: the
   * key is the realm, the headers are only used for the call). Callers must have been
   * authenticated by the upstream already before they are served cached data.
   * Rejects when the upstream cannot give the list; a failure is not cached.
   */
  get(realm: Realm, headers: Record<string, string>): Promise<Directory> {
    return this.cache.get(realm.key, { realm, headers });
  }

  /**
   * Re-reads the realm's list (a user the cached one does not know may have joined since),
   * unless the cached list is younger than minRefreshMs.
   */
  async refresh(realm: Realm, headers: Record<string, string>): Promise<Directory> {
    const cached = await this.get(realm, headers);
    if (Date.now() - cached.fetchedAt < this.minRefreshMs) return cached;
    // One refresh per realm at a time: a second one would drop the first one's read.
    let p = this.refreshing.get(realm.key);
    if (!p) {
      p = this.cache
        .delete(realm.key)
        .then(() => this.get(realm, headers))
        .finally(() => this.refreshing.delete(realm.key));
      this.refreshing.set(realm.key, p);
    }
    return p;
  }

  private async load({ realm, headers }: LoadContext): Promise<Directory> {
    // A web-app caller (session cookie, no Basic auth) can only read the list under /json.
    const path = `${apiPrefixFor(headers)}/users`;
    const r = await fetchLarge(this.client, { realm, method: 'GET', path, headers }, this.maxAnswerBytes, () => this.tooLarge(realm));
    if (!isSuccess(r.status)) {
      this.log.warn({ realm: realm.host, status: r.status }, 'user directory: GET /users failed');
      throw upstreamBadResponse(`GET /users answered HTTP ${r.status}`);
    }
    const dir = await Directory.of(await this.parser.userList(r.body), Date.now());
    this.log.debug({ realm: realm.host, members: dir.size, bytes: dir.bytes }, 'user directory loaded');
    if (dir.ambiguousEmails.size > 0) this.logAmbiguity(realm, dir);
    if (dir.bytes > this.maxBytes && !this.tooLargeLogged) {
      this.tooLargeLogged = true;
      this.log.warn(
        { realm: realm.host, bytes: dir.bytes, maxBytes: this.maxBytes },
        'user list larger than memory.userDirectoriesBytes: not kept, read again for every lookup; raise memory.userDirectoriesBytes',
      );
    }
    return dir;
  }

  private logAmbiguity(realm: Realm, dir: Directory): void {
    if (!firstFor(this.ambiguityLogged, realm)) return;
    const emails = [...dir.ambiguousEmails].slice(0, 10);
    const userIds = emails.map((e) => dir.idOf(e) ?? null);
    this.log.warn(
      { realm: realm.host, shared: dir.ambiguousEmails.size, unmapped: userIds.filter((id) => id === null).length, userIds },
      'user list: several users share an email; presence goes to the one active user, or to nobody when that is not one',
    );
  }

  /**
   * X10: 2.1 bots whose owner is named by an email several users of a list share (the user id
   * each such email stood for, by emailPicks; undefined for none), logged once per realm.
   */
  logAmbiguousBotOwners(realm: Realm, owners: ReadonlyMap<string, number | undefined>): void {
    if (owners.size === 0 || !firstFor(this.ownerAmbiguityLogged, realm)) return;
    const userIds = [...owners.values()].slice(0, 10).map((id) => id ?? null);
    const unmapped = [...owners.values()].filter((id) => id === undefined).length;
    this.log.warn(
      { realm: realm.host, shared: owners.size, unmapped, userIds },
      "user list: a bot's owner is named by an email several users share; bot_owner_id is the one active user, or null when that is not one",
    );
  }

  private tooLarge(realm: Realm): void {
    if (this.tooLargeLogged) return;
    this.tooLargeLogged = true;
    this.log.warn(
      { realm: realm.host, maxBytes: this.maxAnswerBytes },
      'GET /users answer larger than memory.largeAnswerBytes: presence and profile lookups fail for this realm; raise memory.largeAnswerBytes',
    );
  }
}
