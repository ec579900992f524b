import type { RedisConnection } from './redis-connection.js';
import type { CacheBackend } from './shared-cache.js';

/** SharedCache values in Redis: `<prefix>cache:<name>:<key>`, JSON text with PX expiry (S1). */
export class RedisCacheBackend implements CacheBackend {
  constructor(
    private readonly conn: RedisConnection,
    private readonly prefix: string,
  ) {}

  async get(key: string): Promise<{ json: string; ttlMs: number } | undefined> {
    const k = this.prefix + key;
    const [json, ttl] = await this.conn.run(async () => {
      const replies = await this.conn.redis.pipeline().get(k).pttl(k).exec();
      const [get, pttl] = replies ?? [];
      if (!get || get[0]) throw get?.[0] ?? new Error('no reply from Redis');
      return [get[1] as string | null, pttl && !pttl[0] ? (pttl[1] as number) : -1] as const;
    });
    return json === null ? undefined : { json, ttlMs: ttl > 0 ? ttl : 1 };
  }

  async set(key: string, json: string, ttlMs: number): Promise<void> {
    await this.conn.run(() => this.conn.redis.set(this.prefix + key, json, 'PX', Math.max(1, Math.round(ttlMs))));
  }

  async delete(key: string): Promise<void> {
    await this.conn.run(() => this.conn.redis.del(this.prefix + key));
  }
}
