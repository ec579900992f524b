import { setImmediate as nextTurn } from 'node:timers/promises';
import { isSuccess } from './relay.js';
import { upstreamBadResponse } from '../http/errors.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import { SharedCache, type CacheBackend } from '../cache/shared-cache.js';
import { bytesOf, type Footprint } from '../cache/budgeted.js';
import type { UpstreamClient } from './client.js';
import { fetchLarge } from './large-fetch.js';
import { BadAnswer, lines, STEP, unpackMember, userColumnsOf, type EmailTable, type Member, type UserColumns } from './large-answers.js';
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
 * rows read back only for the one user asked about, and an email → position map.
 */
export class Directory {
  /** X2: what this directory holds, from its columns. */
  readonly footprint: Footprint;
  /** …in bytes. */
  readonly bytes: number;

  private constructor(
    private readonly columns: UserColumns,
    private readonly positions: ReadonlyMap<string, number>,
    /** The id each email (by position) stands for, after emailPicks; -1 for none. */
    private readonly picked: Int32Array,
    /** X10: emails more than one member of the list has (unmapped unless one is active). */
    readonly ambiguousEmails: ReadonlySet<string>,
    /** When the upstream answered (ms since the epoch), so a reader can tell how fresh it is. */
    readonly fetchedAt: number,
  ) {
    const { ids, joined, active, rowStarts, emails, rows } = columns;
    // The email map's entries (key string, slot) are the largest part after the text.
    this.footprint = {
      fixed: 1024,
      strings: [rows, emails],
      bytes: [ids, joined, active, rowStarts, picked],
      items: ids.length,
      bytesPerItem: 72,
    };
    this.bytes = bytesOf(this.footprint);
  }

  /** Builds the email map in steps, yielding to other requests between them. */
  static async of(columns: UserColumns, fetchedAt: number): Promise<Directory> {
    const byEmail = new Map<string, number>();
    const shared = new Map<string, number[]>();
    let i = 0;
    for (const email of lines(columns.emails)) {
      if (i > 0 && i % STEP === 0) await nextTurn();
      const first = byEmail.get(email);
      if (first === undefined) byEmail.set(email, i);
      else {
        const group = shared.get(email);
        if (group) group.push(i);
        else shared.set(email, [first, i]);
      }
      i++;
    }
    for (const [email, group] of shared) {
      const chosen = emailPicks(columns, group);
      if (chosen >= 0) byEmail.set(email, chosen);
      else byEmail.delete(email);
    }
    const picked = new Int32Array(i);
    i = 0;
    for (const email of lines(columns.emails)) {
      if (i > 0 && i % STEP === 0) await nextTurn();
      const at = byEmail.get(email);
      picked[i++] = at === undefined ? -1 : columns.ids[at]!;
    }
    return new Directory(columns, byEmail, picked, new Set(shared.keys()), fetchedAt);
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
    const i = this.positions.get(email);
    return i === undefined ? undefined : this.columns.ids[i];
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
