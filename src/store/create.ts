import type { Config } from '../config.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import { MemoryStore } from './memory.js';
import { RedisStore } from './redis.js';
import type { PresenceStore } from './types.js';

/** The store the configuration asks for: Redis with `store.redisUrl` (S1), else this process. */
export function createStore(config: Config, log: Logger, metrics: Metrics): PresenceStore {
  const url = config.store.redisUrl;
  if (!url) return new MemoryStore(config.presence.maxRealms);
  return new RedisStore({
    url,
    keyPrefix: config.store.keyPrefix,
    log,
    storeErrors: metrics.storeErrors,
    maxRealms: config.presence.maxRealms,
  });
}
