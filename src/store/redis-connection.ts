import { Redis } from 'ioredis';
import type { Logger } from '../observability/logger.js';
import { StoreHealth } from './redis-health.js';
import { StoreUnavailableError } from './types.js';

export interface RedisConnectionOptions {
  url: string;
  log: Logger;
  /** Counts failed store operations (`store_errors_total`). */
  storeErrors?: { inc(): void } | undefined;
  /** A command unanswered for this long fails (the caller falls back, S1). */
  commandTimeoutMs: number;
  /** A connection attempt unanswered for this long fails and is retried. */
  connectTimeoutMs?: number;
}

/**
 * One Redis connection that fails fast and heals itself: commands issued while disconnected
 * fail at once instead of queueing (enableOfflineQueue: false), commands in flight fail after
 * commandTimeoutMs, and ioredis reconnects in the background, backing off up to 2 s. Shared by
 * the presence store and the lookup caches of a process.
 */
export class RedisConnection {
  readonly redis: Redis;
  readonly health: StoreHealth;
  /** Settles at the first connection's outcome (or after commandTimeoutMs): calls wait for it once. */
  private readonly firstConnect: Promise<unknown>;

  constructor(o: RedisConnectionOptions) {
    this.health = new StoreHealth(o.log, describeRedisUrl(o.url), o.storeErrors);
    this.redis = new Redis(o.url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      commandTimeout: o.commandTimeoutMs,
      connectTimeout: o.connectTimeoutMs ?? 2_000,
      retryStrategy: (attempt) => Math.min(100 * attempt, 2_000),
      enableReadyCheck: true,
    });
    // Connection errors are logged (rate-limited) but counted only when an operation fails.
    this.redis.on('error', (e: unknown) => this.health.failed(e, 0));
    this.redis.on('ready', () => this.health.ok());
    this.firstConnect = new Promise((resolve) => {
      this.redis.once('ready', resolve);
      this.redis.once('error', resolve); // refused: fail fast from now on
      setTimeout(resolve, o.commandTimeoutMs).unref();
    });
  }

  /**
   * Runs Redis commands; any failure becomes a StoreUnavailableError, counted once per caller
   * it fails and logged (rate-limited). Only the very first connection is waited for, so a
   * replica that just started does not fail its first requests for nothing.
   */
  async run<T>(op: () => Promise<T>, callers = 1): Promise<T> {
    let v: T;
    try {
      await this.firstConnect;
      v = await op();
    } catch (e) {
      if (e instanceof StoreUnavailableError) throw e;
      this.health.failed(e, callers);
      throw new StoreUnavailableError(`Redis store: ${e instanceof Error ? e.message : String(e)}`, 'unreachable', { cause: e });
    }
    this.health.ok();
    return v;
  }

  async close(): Promise<void> {
    try {
      await this.redis.quit();
    } catch {
      this.redis.disconnect();
    }
  }
}

/** host:port/db of a Redis URL: fit for logs (P13: the URL may carry a password). */
export function describeRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    const db = u.pathname.replace(/^\//, '');
    return `${u.hostname}:${u.port || 6379}${db ? `/${db}` : ''}`;
  } catch {
    return 'redis';
  }
}
