import { parseRedisNodes, type Config } from '../config/index.js';
import type { Logger } from '../observability/logger.js';
import type { MemoryPool } from '../cache/memory-pool.js';
import type { Metrics } from '../observability/metrics.js';
import type { ReplicaSnapshots } from '../presence/snapshots.js';
import { MemoryStore } from './memory.js';
import type { RedisTarget } from './redis-connection.js';
import { RedisSnapshots } from './redis-snapshots.js';
import { RedisStore } from './redis.js';
import type { PresenceStore } from '../presence/ledger-store.js';

/** The Redis the configuration names (`--redis`, `--redis-sentinels`, `--redis-cluster`), if any. */
export function redisTargetOf(store: Config['store']): RedisTarget | undefined {
  if (store.redisSentinels) {
    // The schema requires redisSentinelName beside redisSentinels.
    return { kind: 'sentinel', sentinels: parseRedisNodes(store.redisSentinels, 26379), name: store.redisSentinelName! };
  }
  if (store.redisCluster) return { kind: 'redis-cluster', nodes: parseRedisNodes(store.redisCluster, 6379) };
  return store.redisUrl ? { kind: 'url', url: store.redisUrl } : undefined;
}

/** The store the configuration asks for: Redis when one is named (S1), else this process. */
/** `pool`: the shim's cap over all its budgets, which the store's ledgers join (memory.totalBytes). */
export function createStore(config: Config, log: Logger, metrics: Metrics, pool?: MemoryPool): PresenceStore {
  const target = redisTargetOf(config.store);
  if (!target) {
    return new MemoryStore({
      maxRealms: config.presence.maxRealms,
      maxBytes: config.memory.ledgersBytes,
      pool,
      onTooLarge: (realm, bytes, maxBytes) =>
        log.warn(
          { realm, bytes, maxBytes },
          'presence ledger larger than memory.ledgersBytes: not kept, every poll gets full data; raise memory.ledgersBytes',
        ),
    });
  }
  return new RedisStore({
    target,
    keyPrefix: config.store.keyPrefix,
    log,
    storeErrors: metrics.storeErrors,
    maxRealms: config.presence.maxRealms,
    maxBytes: config.memory.ledgersBytes,
    pool,
  });
}

/** P9 across replicas, on the same Redis as the store; none for a store of this process only. */
export function replicaSnapshotsFor(store: PresenceStore): ReplicaSnapshots | undefined {
  return store instanceof RedisStore ? new RedisSnapshots(store.conn, { keyPrefix: store.keyPrefix }) : undefined;
}
