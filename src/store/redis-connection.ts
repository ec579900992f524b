import { Cluster, Redis } from 'ioredis';
import type { Logger } from '../observability/logger.js';
import { StoreHealth } from './redis-health.js';
import { StoreUnavailableError } from './types.js';
import type { RedisNode } from '../config/index.js';

/**
 * Where the shared store is: one Redis by URL; a primary found through Sentinels (failover
 * without a single point of failure); or a Redis Cluster, reached through any of its nodes.
 */
export type RedisTarget =
  | { kind: 'url'; url: string }
  | { kind: 'sentinel'; sentinels: RedisNode[]; name: string }
  | { kind: 'redis-cluster'; nodes: RedisNode[] };

export interface RedisConnectionOptions {
  /** Where the store is; `url` is short for `{ kind: 'url', url }`. */
  target?: RedisTarget | undefined;
  url?: string | undefined;
  log: Logger;
  /** Counts failed store operations (`store_errors_total`). */
  storeErrors?: { inc(): void } | undefined;
}

/** A command unanswered for this long fails, so presence answers from the upstream alone quickly (S3). */
const COMMAND_TIMEOUT_MS = 1_000;
/** A connection attempt unanswered for this long fails and is retried. */
const CONNECT_TIMEOUT_MS = 2_000;

/** Reconnect backoff: quick first attempts (a Sentinel failover takes a second or so), at most 2 s. */
const retryStrategy = (attempt: number) => Math.min(100 * attempt, 2_000);

/** A replica that answers a write (the old primary, demoted): drop the connection and find the primary again. */
const reconnectOnError = (err: Error) => err.message.startsWith('READONLY');

function targetOf(o: { target?: RedisTarget | undefined; url?: string | undefined }): RedisTarget {
  if (o.target) return o.target;
  if (o.url) return { kind: 'url', url: o.url };
  throw new Error('a Redis store needs a target');
}

function connect(t: RedisTarget): Redis | Cluster {
  const common = {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: COMMAND_TIMEOUT_MS,
    connectTimeout: CONNECT_TIMEOUT_MS,
    retryStrategy,
    reconnectOnError,
    enableReadyCheck: true,
  };
  if (t.kind === 'url') return new Redis(t.url, common);
  if (t.kind === 'sentinel') {
    return new Redis({
      ...common,
      sentinels: t.sentinels,
      name: t.name,
      sentinelCommandTimeout: COMMAND_TIMEOUT_MS,
      sentinelRetryStrategy: retryStrategy,
      // No failoverDetector: in ioredis 5 its disconnect during a reconnect can end the
      // connection for good. A demoted primary that is still reachable answers writes with
      // READONLY, and reconnectOnError moves to the new one.
    });
  }
  return new Cluster(t.nodes, {
    enableOfflineQueue: false,
    enableReadyCheck: true,
    clusterRetryStrategy: retryStrategy,
    // A command meeting a failover or a moved slot is retried once the slots are known again.
    retryDelayOnFailover: 100,
    retryDelayOnClusterDown: 100,
    retryDelayOnTryAgain: 100,
    slotsRefreshTimeout: COMMAND_TIMEOUT_MS,
    redisOptions: {
      maxRetriesPerRequest: 1,
      commandTimeout: common.commandTimeout,
      connectTimeout: common.connectTimeout,
      reconnectOnError,
    },
  });
}

/**
 * One Redis connection that fails fast and heals itself: commands issued while disconnected
 * fail at once instead of queueing (enableOfflineQueue: false), commands in flight fail after
 * COMMAND_TIMEOUT_MS, and ioredis reconnects in the background, backing off up to 2 s (to the
 * primary the Sentinels name now, or to the Redis Cluster's nodes). Shared by the presence store and
 * the lookup caches of a process.
 */
export class RedisConnection {
  readonly redis: Redis | Cluster;
  readonly health: StoreHealth;
  /** Settles at the first connection's outcome (or after COMMAND_TIMEOUT_MS): calls wait for it once. */
  private readonly firstConnect: Promise<unknown>;

  constructor(o: RedisConnectionOptions) {
    const target = targetOf(o);
    this.health = new StoreHealth(o.log, describeRedisTarget(target), o.storeErrors);
    this.redis = connect(target);
    // Connection errors are logged (rate-limited) but counted only when an operation fails.
    this.redis.on('error', (e: unknown) => this.health.failed(e, 0));
    this.redis.on('ready', () => this.health.ok());
    this.firstConnect = new Promise((resolve) => {
      this.redis.once('ready', resolve);
      this.redis.once('error', resolve); // refused: fail fast from now on
      setTimeout(resolve, COMMAND_TIMEOUT_MS).unref();
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

  /**
   * A second connection to the same store for SUBSCRIBE (a connection in subscribe mode can do
   * nothing else); it follows the same Sentinels or Redis Cluster, and queues while it connects.
   */
  subscriber(): Redis | Cluster {
    const options = { enableOfflineQueue: true, lazyConnect: false };
    return this.redis instanceof Cluster ? this.redis.duplicate([], options) : this.redis.duplicate(options);
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

/** Where the store is, fit for logs (no credential, P13). */
export function describeRedisTarget(t: RedisTarget): string {
  const list = (nodes: RedisNode[]) => nodes.map((n) => `${n.host}:${n.port}`).join(',');
  if (t.kind === 'url') return describeRedisUrl(t.url);
  if (t.kind === 'sentinel') return `sentinel ${t.name} (${list(t.sentinels)})`;
  return `cluster (${list(t.nodes)})`;
}
