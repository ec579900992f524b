import type { Config } from '../config.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import type { ClusterSnapshots } from '../presence/snapshots.js';
import { MemoryStore } from './memory.js';
import { RedisSnapshots } from './redis-snapshots.js';
import { RedisStore } from './redis.js';
import type { PresenceStore } from './types.js';

/** The store the configuration asks for: Redis with `store.redisUrl` (S1), else this process. */
export function createStore(config: Config, log: Logger, metrics: Metrics): PresenceStore {
  const url = config.store.redisUrl;
  if (!url) {
    return new MemoryStore({
      maxRealms: config.presence.maxRealms,
      maxBytes: config.memory.ledgersBytes,
      onTooLarge: (realm, bytes, maxBytes) =>
        log.warn(
          { realm, bytes, maxBytes },
          'presence ledger larger than memory.ledgersBytes: not kept, every poll gets full data; raise memory.ledgersBytes',
        ),
    });
  }
  return new RedisStore({
    url,
    keyPrefix: config.store.keyPrefix,
    log,
    storeErrors: metrics.storeErrors,
    maxRealms: config.presence.maxRealms,
  });
}

/** P9 across replicas, on the same Redis as the store; none for a store of this process only. */
export function clusterSnapshotsFor(store: PresenceStore): ClusterSnapshots | undefined {
  return store instanceof RedisStore ? new RedisSnapshots(store.conn, { keyPrefix: store.keyPrefix }) : undefined;
}
