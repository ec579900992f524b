import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe } from 'vitest';
import { describeRedisUrl } from '../../src/store/redis-connection.js';

/**
 * The Redis the tests use (REDIS_URL, default the local one) and whether it answers. Without it
 * the Redis tests are skipped with a loud warning, unless REQUIRE_REDIS=1 (CI, .ci/run): then
 * they fail. Each test file uses keys under a prefix of its own and deletes them afterwards;
 * never FLUSHDB, other runs may share this Redis.
 */

export const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
export const REDIS_REQUIRED = process.env.REQUIRE_REDIS === '1';

async function probe(url: string): Promise<string | undefined> {
  const r = new Redis(url, { lazyConnect: true, connectTimeout: 1_500, maxRetriesPerRequest: 0, retryStrategy: () => null });
  let cause: string | undefined;
  r.on('error', (e: Error) => (cause ??= e.message));
  try {
    await r.connect();
    const pong = await r.ping();
    return pong === 'PONG' ? undefined : `answered ${pong}`;
  } catch (e) {
    return cause ?? (e as Error).message;
  } finally {
    r.disconnect();
  }
}

/** Why Redis cannot be used, or undefined when it answers. */
export const redisProblem: string | undefined = await probe(REDIS_URL);
export const redisAvailable = redisProblem === undefined;

/** A describe() for tests that need Redis. */
export function describeRedis(name: string, fn: () => void): void {
  const skip = !redisAvailable && !REDIS_REQUIRED;
  if (skip) {
    console.warn(
      `\n!!! SKIPPING "${name}": Redis at ${describeRedisUrl(REDIS_URL)} is unreachable (${redisProblem}). ` +
        'Start one or set REDIS_URL to run these tests; REQUIRE_REDIS=1 turns this into a failure. !!!\n',
    );
  }
  describe.skipIf(skip)(name, () => {
    if (!redisAvailable) {
      beforeAll(() => {
        throw new Error(`REQUIRE_REDIS=1 but Redis at ${describeRedisUrl(REDIS_URL)} is unreachable: ${redisProblem}`);
      });
    }
    fn();
  });
}

/** A key prefix no other test run uses. */
export function testKeyPrefix(): string {
  return `zcs-test:${randomBytes(6).toString('hex')}:`;
}

/**
 * A key prefix of the calling describe's own, for a suite that needs no admin connection of
 * its own: every key under it is deleted after the describe.
 */
export function suiteKeyPrefix(): string {
  const prefix = testKeyPrefix();
  let admin: Redis | undefined;
  beforeAll(() => {
    admin = adminRedis();
  });
  afterAll(async () => {
    if (!admin) return;
    await deleteKeysUnder(admin, prefix);
    admin.disconnect();
  });
  return prefix;
}

/** A plain connection for checks and clean-up (not the one under test). */
export function adminRedis(): Redis {
  const r = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  r.on('error', () => {});
  return r;
}

/** Every key under the prefix. */
export async function keysUnder(redis: Redis, prefix: string): Promise<string[]> {
  const pattern = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`;
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== '0');
  return keys;
}

/** Deletes every key under the prefix (what a FLUSHDB would do to this test's state). */
export async function deleteKeysUnder(redis: Redis, prefix: string): Promise<number> {
  const keys = await keysUnder(redis, prefix);
  if (keys.length > 0) await redis.unlink(...keys);
  return keys.length;
}
