import { randomBytes } from 'node:crypto';
import type { ClusterSnapshots, SnapshotData } from '../presence/snapshots.js';
import type { RedisConnection } from './redis-connection.js';
import { redisKey } from './redis-keys.js';

/**
 * P9 across replicas (S1): at most one full upstream presence fetch per shared scope per window,
 * cluster-wide. The replica that takes a scope's lock (`SET NX PX`) fetches and publishes the
 * snapshot for the window; the others wait for it by polling (one small round trip every
 * `pollMs`). Only shared scopes come here, so a snapshot never holds one caller's view (P7).
 *
 * Keys (redis-keys.ts, one slot per realm): `<prefix>{<realm>}:snap…` (the snapshot as JSON,
 * expiring with the window) and `<prefix>{<realm>}:snap-lock…` (the fetcher's token, expiring
 * after the window if it dies).
 */

/** Takes the lock only when no snapshot is published: a replica that missed a snapshot just
 * published must wait for it, not fetch a second one in the same window. */
const LOCK_LUA = `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0`;

/** Deletes the lock only if it is still ours (it may have expired and been taken since). */
const RELEASE_LUA = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`;

/** The snapshot, or 1 while a fetch holds the lock, or nil when neither. */
const PEEK_LUA = `
local v = redis.call('GET', KEYS[1])
if v then return v end
if redis.call('EXISTS', KEYS[2]) == 1 then return 1 end
return false`;

interface SnapshotCommands {
  zcsSnapLock(data: string, lock: string, token: string, ttlMs: number): Promise<number>;
  zcsSnapRelease(lock: string, token: string): Promise<number>;
  zcsSnapPeek(data: string, lock: string): Promise<string | number | null>;
}

export interface RedisSnapshotsOptions {
  /** Prefix of every key (config `store.keyPrefix`). */
  keyPrefix: string;
  /** How often a waiting replica looks for the snapshot. */
  pollMs?: number;
}

export class RedisSnapshots implements ClusterSnapshots {
  private readonly commands: SnapshotCommands;
  /** This process's lock tokens by scope (the hub lets one fetch per scope run per process). */
  private readonly tokens = new Map<string, string>();
  private readonly pollMs: number;

  constructor(
    private readonly conn: RedisConnection,
    private readonly o: RedisSnapshotsOptions,
  ) {
    this.pollMs = o.pollMs ?? 25;
    conn.redis.defineCommand('zcsSnapLock', { numberOfKeys: 2, lua: LOCK_LUA });
    conn.redis.defineCommand('zcsSnapRelease', { numberOfKeys: 1, lua: RELEASE_LUA });
    conn.redis.defineCommand('zcsSnapPeek', { numberOfKeys: 2, lua: PEEK_LUA });
    this.commands = conn.redis as unknown as SnapshotCommands;
  }

  async get(scope: string): Promise<SnapshotData | undefined> {
    return parse(await this.conn.run(() => this.conn.redis.get(this.dataKey(scope))));
  }

  async tryLock(scope: string, ttlMs: number): Promise<boolean> {
    const token = randomBytes(12).toString('base64url');
    const got = await this.conn.run(() => this.commands.zcsSnapLock(this.dataKey(scope), this.lockKey(scope), token, ttl(ttlMs)));
    if (got === 1) this.tokens.set(scope, token);
    return got === 1;
  }

  async publish(scope: string, data: SnapshotData, ttlMs: number): Promise<void> {
    const json = JSON.stringify(data);
    await this.conn.run(() => this.conn.redis.set(this.dataKey(scope), json, 'PX', ttl(ttlMs)));
    await this.release(scope);
  }

  async release(scope: string): Promise<void> {
    const token = this.tokens.get(scope);
    if (token === undefined) return;
    this.tokens.delete(scope);
    await this.conn.run(() => this.commands.zcsSnapRelease(this.lockKey(scope), token));
  }

  /** The snapshot once published; undefined at the timeout, or at once when the fetcher gave up. */
  async waitFor(scope: string, timeoutMs: number): Promise<SnapshotData | undefined> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const v = await this.conn.run(() => this.commands.zcsSnapPeek(this.dataKey(scope), this.lockKey(scope)));
      if (typeof v === 'string') return parse(v);
      if (v === null || Date.now() >= until) return undefined; // no snapshot and nobody fetching
      await new Promise((r) => setTimeout(r, Math.min(this.pollMs, Math.max(0, until - Date.now()))));
    }
  }

  dataKey(scope: string): string {
    return redisKey(this.o.keyPrefix, 'snap', scope);
  }

  lockKey(scope: string): string {
    return redisKey(this.o.keyPrefix, 'snap-lock', scope);
  }
}

const ttl = (ms: number) => Math.max(1, Math.round(ms));

function parse(json: string | null): SnapshotData | undefined {
  if (json === null) return undefined;
  try {
    const d = JSON.parse(json) as SnapshotData;
    return typeof d.serverTimestamp === 'number' ? d : undefined;
  } catch {
    return undefined; // not written by this shim: fetched again
  }
}
