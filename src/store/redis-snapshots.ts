import { randomBytes } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { ReplicaSnapshots, PublishedSnapshot, SnapshotData } from '../presence/snapshots.js';
import type { RedisConnection } from './redis-connection.js';
import { redisKey } from './redis-keys.js';

/**
 * P9 across replicas (S1): at most one full upstream presence fetch per shared scope per window
 * among them all. The replica that takes a scope's lock (`SET NX PX`) fetches, merges the answer
 * into the realm's ledger (the store) and publishes what the others need besides the ledger —
 * the upstream's time and, for the legacy format, its answer's bytes as made — for the rest of
 * the window, then notifies them (PUBLISH). A waiting replica is woken by that notification
 * (one subscriber connection per process), reads the snapshot once and keeps it locally until
 * the key expires, so no replica reads or parses the same snapshot twice. The legacy bytes
 * (2 MB at 10k users) lie in a key of their own, read only by a replica that has a legacy poll
 * to answer (`readLegacyBytes`), never by one whose callers all poll in the modern format.
 * Only shared scopes come here, so a snapshot never holds one caller's view (P7).
 *
 * Keys (all named by `keyOf`, redis-keys.ts: one slot per realm on a Redis Cluster):
 * `<prefix>{<realm>}:snap…` (a JSON header; expiring with the window),
 * `<prefix>{<realm>}:snap-legacy:<id>…` (the legacy bytes, named per publish so a replica
 * never reads another window's bytes under its header; kept a window longer than the header,
 * so a replica still answering from the header finds them), `<prefix>{<realm>}:snap-lock…` (the fetcher's token, expiring after the window if it
 * dies), and the channel `<prefix>snap-ready` (messages: the scope). The channel is not a key:
 * scripts get it as an argument, so each touches the keys of one slot only.
 */

/** Takes the lock only when no snapshot is published: a replica that missed a snapshot just
 * published must wait for it, not fetch a second one in the same window. */
const LOCK_LUA = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0`;

/** Publishes the snapshot for the rest of its window (its legacy bytes ARGV[6], if any, under
 * KEYS[3] for ARGV[7] ms), drops our lock, wakes the waiters. The channel is an argument, not a
 * key: a script's keys must share one Redis Cluster slot. */
const PUBLISH_LUA = `
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[6] ~= '' then redis.call('SET', KEYS[3], ARGV[6], 'PX', ARGV[7]) end
if redis.call('GET', KEYS[2]) == ARGV[3] then redis.call('DEL', KEYS[2]) end
redis.call('PUBLISH', ARGV[5], ARGV[4])
return 1`;

/** Deletes the lock only if it is still ours (it may have expired and been taken since), and
 * wakes the waiters (channel ARGV[3]) so they stop waiting at once. */
const RELEASE_LUA = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[3], ARGV[2])
end
return 0`;

/** {snapshot, its remaining ms}, or 1 while a fetch holds the lock, or nil when neither. */
const PEEK_LUA = `
local v = redis.call('GET', KEYS[1])
if v then return {v, redis.call('PTTL', KEYS[1])} end
if redis.call('EXISTS', KEYS[2]) == 1 then return 1 end
return false`;

type Peeked = [Buffer, number] | number | null;

interface SnapshotCommands {
  zcsSnapLock(data: string, lock: string, token: string, ttlMs: number): Promise<number>;
  zcsSnapPublish(
    data: string,
    lock: string,
    legacy: string,
    value: Buffer,
    ttlMs: number,
    token: string,
    scope: string,
    channel: string,
    legacyBytes: Buffer,
    legacyTtlMs: number,
  ): Promise<number>;
  zcsSnapRelease(lock: string, token: string, scope: string, channel: string): Promise<number>;
  zcsSnapPeekBuffer(data: string, lock: string): Promise<Peeked>;
}

export interface RedisSnapshotsOptions {
  /** Prefix of every key (config `store.keyPrefix`). */
  keyPrefix: string;
}

export class RedisSnapshots implements ReplicaSnapshots {
  private readonly commands: SnapshotCommands;
  /** This process's lock tokens by scope (the hub lets one fetch per scope run per process). */
  private readonly tokens = new Map<string, string>();
  /** Waiters by scope, woken by a `snap-ready` message. */
  private readonly waiters = new Map<string, Set<() => void>>();
  private subscriber?: Promise<Redis | Cluster>;

  constructor(
    private readonly conn: RedisConnection,
    private readonly o: RedisSnapshotsOptions,
  ) {
    conn.redis.defineCommand('zcsSnapLock', { numberOfKeys: 2, lua: LOCK_LUA });
    conn.redis.defineCommand('zcsSnapPublish', { numberOfKeys: 3, lua: PUBLISH_LUA });
    conn.redis.defineCommand('zcsSnapRelease', { numberOfKeys: 1, lua: RELEASE_LUA });
    conn.redis.defineCommand('zcsSnapPeek', { numberOfKeys: 2, lua: PEEK_LUA });
    this.commands = conn.redis as unknown as SnapshotCommands;
  }

  /** Every key and channel name of this module, in one place. */
  keyOf(kind: 'snap' | 'snap-lock' | 'snap-legacy' | 'snap-ready', scope = '', id?: string): string {
    return kind === 'snap-ready' ? `${this.o.keyPrefix}snap-ready` : redisKey(this.o.keyPrefix, kind, scope, id);
  }

  async get(scope: string): Promise<PublishedSnapshot | undefined> {
    const v = await this.peek(scope);
    return Array.isArray(v) ? this.decode(scope, v[0], v[1]) : undefined;
  }

  async tryLock(scope: string, ttlMs: number): Promise<boolean> {
    const token = randomBytes(12).toString('base64url');
    const got = await this.conn.run(() =>
      this.commands.zcsSnapLock(this.keyOf('snap', scope), this.keyOf('snap-lock', scope), token, ttl(ttlMs)),
    );
    if (got === 1) this.tokens.set(scope, token);
    return got === 1;
  }

  async publish(scope: string, data: SnapshotData, remainingMs: number): Promise<void> {
    const token = this.tokens.get(scope) ?? '';
    this.tokens.delete(scope);
    if (remainingMs < 1) return void (await this.release(scope, token)); // the window is over already
    const legacyId = data.legacyBytes ? randomBytes(9).toString('base64url') : undefined;
    const value = encode(data, legacyId);
    await this.conn.run(() =>
      this.commands.zcsSnapPublish(
        this.keyOf('snap', scope),
        this.keyOf('snap-lock', scope),
        this.keyOf('snap-legacy', scope, legacyId ?? ''),
        value,
        ttl(remainingMs),
        token,
        scope,
        this.keyOf('snap-ready'),
        data.legacyBytes ?? NO_BYTES,
        ttl(2 * remainingMs + LEGACY_GRACE_MS),
      ),
    );
  }

  async release(scope: string, token = this.tokens.get(scope)): Promise<void> {
    this.tokens.delete(scope);
    if (!token) return;
    await this.conn.run(() => this.commands.zcsSnapRelease(this.keyOf('snap-lock', scope), token, scope, this.keyOf('snap-ready')));
  }

  /** The snapshot once published; undefined at the timeout, or at once when the fetcher gave up. */
  async waitFor(scope: string, timeoutMs: number): Promise<PublishedSnapshot | undefined> {
    await this.subscribed();
    let wake!: () => void;
    const woken = new Promise<void>((resolve) => (wake = resolve));
    const set = this.waiters.get(scope) ?? new Set();
    set.add(wake);
    this.waiters.set(scope, set);
    const timer = setTimeout(wake, timeoutMs);
    try {
      // Subscribed before looking: a notification sent after this look is not missed.
      const first = await this.peek(scope);
      if (Array.isArray(first)) return this.decode(scope, first[0], first[1]);
      if (first === null) return undefined; // no snapshot and nobody fetching
      await woken;
      return await this.get(scope);
    } finally {
      clearTimeout(timer);
      set.delete(wake);
      if (set.size === 0) this.waiters.delete(scope);
    }
  }

  private decode(scope: string, value: Buffer, remainingMs: number): PublishedSnapshot | undefined {
    return decode(value, remainingMs, (id) => async () => {
      const bytes = await this.conn.run(() => this.conn.redis.getBuffer(this.keyOf('snap-legacy', scope, id)));
      return bytes ?? undefined;
    });
  }

  private peek(scope: string): Promise<Peeked> {
    return this.conn.run(() => this.commands.zcsSnapPeekBuffer(this.keyOf('snap', scope), this.keyOf('snap-lock', scope)));
  }

  /** The process's one subscriber connection (a connection in subscribe mode can do nothing else). */
  private subscribed(): Promise<Redis | Cluster> {
    this.subscriber ??= (async () => {
      const sub = this.conn.subscriber();
      // Its errors show on the main connection too, which logs and counts them.
      sub.on('error', () => undefined);
      sub.on('messageBuffer', (_channel: Buffer, message: Buffer) => {
        for (const wake of this.waiters.get(message.toString('utf8')) ?? []) wake();
      });
      this.conn.redis.once('end', () => sub.disconnect());
      await this.conn.run(() => sub.subscribe(this.keyOf('snap-ready')));
      return sub;
    })();
    // A failed subscription is tried again by the next waiter.
    this.subscriber.catch(() => (this.subscriber = undefined));
    return this.subscriber;
  }
}

const ttl = (ms: number) => Math.max(1, Math.round(ms));
const NO_BYTES = Buffer.alloc(0);
/** The legacy bytes outlive their header by this much more than a window (clock skew, a slow poll). */
const LEGACY_GRACE_MS = 1_000;

/** A JSON header line; the legacy answer's bytes (never re-serialised) go to a key of their own, `legacyId`. */
function encode(d: SnapshotData, legacyId: string | undefined): Buffer {
  const header = JSON.stringify({
    serverTimestamp: d.serverTimestamp,
    modernError: d.modernError,
    legacyUsers: d.legacyUsers,
    legacyId,
  });
  return Buffer.from(`${header}\n`);
}

function decode(
  value: Buffer,
  remainingMs: number,
  reader: (legacyId: string) => () => Promise<Buffer | undefined>,
): PublishedSnapshot | undefined {
  const end = value.indexOf(10);
  if (end < 0) return undefined; // not written by this shim: fetched again
  try {
    const h = JSON.parse(value.subarray(0, end).toString('utf8')) as Record<string, unknown>;
    if (typeof h.serverTimestamp !== 'number') return undefined;
    const data: SnapshotData = {
      serverTimestamp: h.serverTimestamp,
      modernError: typeof h.modernError === 'string' ? h.modernError : undefined,
      legacyUsers: typeof h.legacyUsers === 'number' ? h.legacyUsers : undefined,
      // A value of the format before the bytes had a key of their own: inline after the header.
      legacyBytes: h.legacy === true ? value.subarray(end + 1) : undefined,
      readLegacyBytes: typeof h.legacyId === 'string' ? reader(h.legacyId) : undefined,
    };
    return { data, remainingMs: Math.max(remainingMs, 0) };
  } catch {
    return undefined; // not written by this shim: fetched again
  }
}
