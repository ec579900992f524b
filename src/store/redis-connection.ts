import { Redis } from 'ioredis';

export interface RedisConnectionOptions {
  /** A command unanswered for this long fails (the caller falls back, S1). */
  commandTimeoutMs: number;
  /** A connection attempt unanswered for this long fails and is retried. */
  connectTimeoutMs?: number;
}

/**
 * A connection that fails fast and heals itself: commands issued while disconnected fail at
 * once instead of queueing (enableOfflineQueue: false), commands in flight fail after
 * commandTimeoutMs, and ioredis reconnects in the background, backing off up to 2 s.
 */
export function connectRedis(url: string, o: RedisConnectionOptions): Redis {
  return new Redis(url, {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: o.commandTimeoutMs,
    connectTimeout: o.connectTimeoutMs ?? 2_000,
    retryStrategy: (attempt) => Math.min(100 * attempt, 2_000),
    enableReadyCheck: true,
  });
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
