import type { RedisConnection } from './redis-connection.js';
import { redisKey } from './redis-keys.js';
import type { CacheBackend } from '../cache/shared-cache.js';

/**
 * SharedCache values in Redis: JSON text with PX expiry (S1). A SharedCache key is
 * `<cache name>:<realm-scoped key>`; stored as `<prefix>{<realm>}:cache:<cache name>…` (redis-keys.ts).
 */
export class RedisCacheBackend implements CacheBackend {
  constructor(
    private readonly conn: RedisConnection,
    /** Prefix of every key (config `store.keyPrefix`). */
    private readonly keyPrefix: string,
  ) {}

  key(cacheKey: string): string {
    const colon = cacheKey.indexOf(':');
    return colon < 0
      ? redisKey(this.keyPrefix, 'cache', cacheKey)
      : redisKey(this.keyPrefix, 'cache', cacheKey.slice(colon + 1), cacheKey.slice(0, colon));
  }

  async get(key: string): Promise<{ json: string; ttlMs: number } | undefined> {
    const k = this.key(key);
    const [json, ttl] = await this.conn.run(async () => {
      // One key, one slot: a pipeline is fine on a Redis Cluster too.
      const replies = await this.conn.redis.pipeline().get(k).pttl(k).exec();
      const [get, pttl] = replies ?? [];
      if (!get || get[0]) throw get?.[0] ?? new Error('no reply from Redis');
      return [get[1] as string | null, pttl && !pttl[0] ? (pttl[1] as number) : -1] as const;
    });
    return json === null ? undefined : { json, ttlMs: ttl > 0 ? ttl : 1 };
  }

  async set(key: string, json: string, ttlMs: number): Promise<void> {
    await this.conn.run(() => this.conn.redis.set(this.key(key), json, 'PX', Math.max(1, Math.round(ttlMs))));
  }

  async delete(key: string): Promise<void> {
    await this.conn.run(() => this.conn.redis.del(this.key(key)));
  }
}
