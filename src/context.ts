import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from './config.js';
import type { Logger } from './observability/logger.js';
import type { Metrics } from './observability/metrics.js';
import type { UpstreamClient } from './upstream/client.js';
import type { ClusterSnapshots, SnapshotHub } from './presence/snapshots.js';
import type { PresenceState } from './presence/state.js';
import type { ParsePool } from './parse/parse-worker.js';
import type { PresenceStore } from './presence/ledger-store.js';
import type { FeatureLevels } from './upstream/feature-level.js';
import type { UserDirectory } from './upstream/user-directory.js';
import type { Callers } from './upstream/callers.js';

/** What every handler of an intercepted endpoint gets: configuration and the shared parts. */
export interface ShimContext {
  config: Config;
  log: Logger;
  /** The upstream's identity (its configured URL, or `replay:` + file): part of every realm key. */
  upstreamId: string;
  client: UpstreamClient;
  featureLevels: FeatureLevels;
  /** Realm presence ledgers (memory, or Redis for replicas). */
  store: PresenceStore;
  /** P9: shared presence snapshots in this process… */
  snapshots: SnapshotHub;
  /** …and across replicas (Redis), when there are several. */
  clusterSnapshots?: ClusterSnapshots | undefined;
  /** B7: where large upstream answers are read (off the main thread). */
  parser: ParsePool;
  /** What the presence poll derives and remembers beside the ledgers and snapshots. */
  presence: PresenceState;
  metrics: Metrics;
  /** Who a caller is (their GET /users/me), cached per credentials (V2, P15). */
  callers: Callers;
  /** The realm's user list (GET /users), cached per realm: email ↔ user_id, own-profile rows. */
  users: UserDirectory;
}

export type Handler = (req: IncomingMessage, res: ServerResponse, ctx: ShimContext) => Promise<void>;
