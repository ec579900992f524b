import { MemoryPool } from './cache/memory-pool.js';
import { memoryCap, type Config } from './config/index.js';
import type { LayerState, LayerStateKey, ShimContext } from './context.js';
import type { LiveSettings } from './live-settings.js';
import type { Logger } from './observability/logger.js';
import { createMetrics, type Metrics } from './observability/metrics.js';
import { upstreamObserver } from './observability/upstream-metrics.js';
import { PARSE_POOL, ParsePool } from './parse/parse-worker.js';
import type { PresenceStore } from './presence/ledger-store.js';
import { SnapshotHub, type ReplicaSnapshots } from './presence/snapshots.js';
import { PresenceState } from './presence/state.js';
import { createStore, replicaSnapshotsFor } from './store/create.js';
import { Callers } from './upstream/callers.js';
import { UpstreamClient } from './upstream/client.js';
import { DeliveryEmails } from './upstream/delivery-emails.js';
import { FeatureLevels } from './upstream/feature-level.js';
import { RealmAdmission } from './upstream/realm-admission.js';
import { createTransport, type Transport } from './upstream/transport.js';
import { USER_LIST_MIN_REFRESH_MS, UserDirectory } from './upstream/user-directory.js';

/**
 * The shim's services, built once per shim from its configuration: the one way to the upstream,
 * the caches of what the upstream said, where realm state lives, and the metrics. The handlers
 * are given them as the ShimContext; the server adds the listeners in front.
 */

export interface ServiceOptions {
  config: Config;
  log: Logger;
  /** Where upstream traffic goes (the upstream, or a recorder/replayer standing in for it). */
  target: string;
  /** The upstream's identity for realm keys. */
  upstreamId: string;
  /** Where realm state lives; by default the one config.store asks for (Redis or in-memory). */
  store?: PresenceStore | undefined;
  /** Cross-replica snapshot sharing; by default on the store's Redis, if it has one. */
  replicaSnapshots?: ReplicaSnapshots | undefined;
  /** X5: retry safe requests on a broken kept-alive connection. @default true */
  retryUpstream?: boolean | undefined;
}

export interface Services {
  context: ShimContext;
  /** The one way to the upstream, for the pass-through and the shim's own calls alike. */
  transport: Transport;
}

function upstreamClient(o: ServiceOptions, metrics: Metrics): { client: UpstreamClient; transport: Transport } {
  const { upstream } = o.config;
  const transport = createTransport({
    target: o.target,
    timeoutMs: upstream.timeoutMs,
    maxSockets: upstream.maxSockets,
    insecureTls: upstream.insecureTls,
    observe: upstreamObserver(metrics),
    retry: o.retryUpstream ?? true,
  });
  const client = new UpstreamClient({
    target: o.target,
    timeoutMs: upstream.timeoutMs,
    maxSockets: upstream.maxSockets,
    insecureTls: upstream.insecureTls,
    maxResponseBytes: upstream.maxResponseBytes,
    transport,
  });
  return { client, transport };
}

/** What the shim remembers of realms and their users, built on the client and the store. */
function realmServices(
  o: ServiceOptions,
  live: LiveSettings,
  client: UpstreamClient,
  store: PresenceStore,
  metrics: Metrics,
  pool: MemoryPool,
) {
  const { config, log } = o;
  const callers = new Callers(client, metrics, { ...config.lookups, maxBytes: config.memory.callersBytes, pool });
  const admission = new RealmAdmission({
    perMinute: config.presence.newRealmsPerMinute,
    perAddressPerMinute: config.presence.newRealmsPerAddressPerMinute,
    admitted: store,
    addressOf: (req) => live.clientAddressOf(req),
    client,
    callers,
    maxKnown: config.presence.maxRealms * 4,
    onRefused: () => metrics.realmsRefused.inc(),
  });
  const parser = new ParsePool(PARSE_POOL);
  const users = new UserDirectory(client, log, metrics, {
    ...config.lookups,
    minRefreshMs: USER_LIST_MIN_REFRESH_MS,
    backend: store.cacheBackend,
    parser,
    maxBytes: config.memory.userDirectoriesBytes,
    pool,
    maxAnswerBytes: config.memory.largeAnswerBytes,
  });
  const deliveryEmails = new DeliveryEmails(client, log, metrics, {
    ...config.lookups,
    maxBytes: config.memory.lookupsBytes,
    pool,
    backend: store.cacheBackend,
  });
  return { callers, admission, parser, users, deliveryEmails };
}

/** The shim's LayerState: each key's state made once, on its first use. */
function layerState(): LayerState {
  const held = new Map<LayerStateKey<unknown>, unknown>();
  return {
    of<T>(key: LayerStateKey<T>, create: () => T): T {
      if (!held.has(key)) held.set(key, create());
      return held.get(key) as T;
    },
  };
}

/** Builds the services; `live` holds what a reload may change (the trusted proxies a client address is read through). */
export function buildServices(o: ServiceOptions, live: LiveSettings): Services {
  const { config, log } = o;
  const metrics = createMetrics();
  const { client, transport } = upstreamClient(o, metrics);
  // X2: one cap over the budgets of realms taken on (a flood of mid-sized realms would fill them
  // all); server_settings answers, asked before any credential is checked, keep their own apart.
  const pool = new MemoryPool(memoryCap(config.memory));
  metrics.memoryCharged.read = () => pool.usedByBudget();
  metrics.memoryBudgetsMax.set(pool.maxBytes);
  const featureLevels = new FeatureLevels(client, log, { ...config.featureLevel, maxBytes: config.memory.featureLevelsBytes });
  const store = o.store ?? createStore(config, log, metrics, pool);
  metrics.storeProbe.ping = () => store.ping();
  const snapshots = new SnapshotHub(
    config.presence.coalesceMs,
    config.presence.maxRealms * 4,
    Date.now,
    config.memory.snapshotsBytes,
    config.memory.answersBytes,
    pool,
  );
  const context: ShimContext = {
    config,
    log,
    upstreamId: o.upstreamId,
    client,
    featureLevels,
    store,
    snapshots,
    replicaSnapshots: o.replicaSnapshots ?? replicaSnapshotsFor(store),
    presence: new PresenceState(config.lookups.maxEntries),
    metrics,
    ...realmServices(o, live, client, store, metrics, pool),
    layerState: layerState(),
  };
  return { context, transport };
}
