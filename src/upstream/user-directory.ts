import { isSuccess } from '../http/relay.js';
import { upstreamBadResponse } from '../http/errors.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import { SharedCache, type CacheBackend } from '../store/shared-cache.js';
import { parseJsonObject, type UpstreamClient } from './client.js';
import type { Realm } from './realm.js';

/**
 * The realm's user directory: one cached, single-flight, bounded `GET /api/v1/users` per realm
 * (shared by replicas through the store when there is one, S1),
 * used to map emails to user ids (presence) and to read the caller's own row (own profile).
 *
 * The list is whatever the upstream showed the caller whose request loaded it. Before feature
 * level 228 every member of a realm sees the same list; from 228 a guest may see fewer users,
 * so a reader must treat a missing user as "not known", never as "does not exist".
 */

/** The fields of a `GET /users` member the shim reads (zulip-server.md §5.2, every era). */
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
}

export interface Directory {
  /** X10: an email several members share maps to its one active member, or to none. */
  byEmail: ReadonlyMap<string, Member>;
  /** X10: emails more than one member of the list has (left out of `byEmail` unless one is active). */
  ambiguousEmails: ReadonlySet<string>;
  byId: ReadonlyMap<number, Member>;
  /** When the upstream answered (ms since the epoch), so a reader can tell how fresh it is. */
  fetchedAt: number;
}

export interface UserDirectoryOptions {
  /** How long a realm's list is used before it is read again. */
  ttlMs: number;
  /** Realms kept in this process at most (least recently used go first). */
  maxEntries: number;
  /**
   * refresh() re-reads a list only when it is older than this (default 1000), so a user the
   * list cannot show (another realm's bot) costs at most one read per this many ms.
   */
  minRefreshMs?: number;
  /** S1: where replicas share the lists (the store's cache backend); absent: this process only. */
  backend?: CacheBackend | undefined;
}

interface LoadContext {
  realm: Realm;
  headers: Record<string, string>;
}

/** What is cached (and shared between replicas as JSON): the members as read. */
interface Stored {
  members: Member[];
  fetchedAt: number;
}

const str = (v: unknown): v is string => typeof v === 'string';
const bool = (v: unknown): v is boolean => typeof v === 'boolean';
const int = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);

/** Reads one member; undefined when the row lacks what every era sends. Pure. */
export function memberOf(row: unknown): Member | undefined {
  if (!row || typeof row !== 'object') return undefined;
  const r = row as Record<string, unknown>;
  if (!int(r.user_id) || !str(r.email)) return undefined;
  const m: Member = {
    user_id: r.user_id,
    email: r.email,
    is_bot: bool(r.is_bot) ? r.is_bot : false,
    is_active: bool(r.is_active) ? r.is_active : true,
    is_admin: bool(r.is_admin) ? r.is_admin : false,
    is_guest: bool(r.is_guest) ? r.is_guest : false,
    timezone: str(r.timezone) ? r.timezone : '',
    date_joined: str(r.date_joined) ? r.date_joined : '',
  };
  if (str(r.full_name)) m.full_name = r.full_name;
  if (bool(r.is_owner)) m.is_owner = r.is_owner;
  if (int(r.role)) m.role = r.role;
  if (int(r.avatar_version)) m.avatar_version = r.avatar_version;
  if (str(r.delivery_email)) m.delivery_email = r.delivery_email;
  return m;
}

function storedOf(answer: Record<string, unknown>, fetchedAt: number): Stored {
  if (!Array.isArray(answer.members)) throw upstreamBadResponse('GET /users has no members list');
  const members: Member[] = [];
  for (const row of answer.members) {
    const m = memberOf(row);
    if (m) members.push(m);
  }
  return { members, fetchedAt };
}

/**
 * X10: the member an email shared by several stands for: the one active member (presence is
 * only ever reported for active users); none when that is not exactly one, so no user's
 * presence is attributed to another.
 */
export function memberForSharedEmail(members: readonly Member[]): Member | undefined {
  const active = members.filter((m) => m.is_active);
  return active.length === 1 ? active[0] : undefined;
}

function directoryFrom({ members, fetchedAt }: Stored): Directory {
  const byEmail = new Map<string, Member>();
  const shared = new Map<string, Member[]>();
  for (const m of members) {
    const group = shared.get(m.email);
    const first = byEmail.get(m.email);
    if (group) group.push(m);
    else if (first) shared.set(m.email, [first, m]);
    else byEmail.set(m.email, m);
  }
  for (const [email, group] of shared) {
    const chosen = memberForSharedEmail(group);
    if (chosen) byEmail.set(email, chosen);
    else byEmail.delete(email);
  }
  return { byEmail, ambiguousEmails: new Set(shared.keys()), byId: new Map(members.map((m) => [m.user_id, m])), fetchedAt };
}

/** Builds the directory from a `GET /users` answer (`{"members": [...]}`). Pure. */
export function directoryOf(answer: Record<string, unknown>, fetchedAt: number): Directory {
  return directoryFrom(storedOf(answer, fetchedAt));
}

export class UserDirectory {
  private readonly cache: SharedCache<Stored, LoadContext>;
  /** The maps of each cached list, built once per list rather than per request. */
  private readonly built = new WeakMap<Stored, Directory>();
  private readonly minRefreshMs: number;
  private readonly refreshing = new Map<string, Promise<Directory>>();
  /** Realms whose shared emails were logged already (X10: once). */
  private readonly ambiguityLogged = new Set<string>();

  constructor(
    private readonly client: UpstreamClient,
    private readonly log: Logger,
    metrics: Metrics,
    options: UserDirectoryOptions,
  ) {
    this.minRefreshMs = options.minRefreshMs ?? 1_000;
    this.cache = new SharedCache<Stored, LoadContext>({
      name: 'user_directory',
      ttlMs: options.ttlMs,
      max: options.maxEntries,
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
  async get(realm: Realm, headers: Record<string, string>): Promise<Directory> {
    const stored = await this.cache.get(realm.key, { realm, headers });
    let dir = this.built.get(stored);
    if (!dir) {
      dir = directoryFrom(stored);
      this.built.set(stored, dir);
      if (dir.ambiguousEmails.size > 0) this.logAmbiguity(realm, dir);
    }
    return dir;
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

  /** X10: once per realm and process, which emails several users share and what was chosen. */
  private logAmbiguity(realm: Realm, dir: Directory): void {
    if (this.ambiguityLogged.has(realm.key)) return;
    if (this.ambiguityLogged.size >= 1_000) this.ambiguityLogged.clear();
    this.ambiguityLogged.add(realm.key);
    const emails = [...dir.ambiguousEmails].slice(0, 10);
    const unmapped = emails.filter((e) => !dir.byEmail.has(e)).length;
    this.log.warn(
      { realm: realm.host, shared: dir.ambiguousEmails.size, unmapped, userIds: emails.map((e) => dir.byEmail.get(e)?.user_id ?? null) },
      'user list: several users share an email; presence goes to the one active user, or to nobody when that is not one',
    );
  }

  private async load({ realm, headers }: LoadContext): Promise<Stored> {
    // A web-app caller (session cookie, no Basic auth) can only read the list under /json.
    const path = headers.authorization ? '/api/v1/users' : '/json/users';
    const r = await this.client.fetch({ realm, method: 'GET', path, headers });
    if (!isSuccess(r.status)) {
      this.log.warn({ realm: realm.host, status: r.status }, 'user directory: GET /users failed');
      throw upstreamBadResponse(`GET /users answered HTTP ${r.status}`);
    }
    const stored = storedOf(parseJsonObject(r.body), Date.now());
    this.log.debug({ realm: realm.host, members: stored.members.length }, 'user directory loaded');
    return stored;
  }
}
