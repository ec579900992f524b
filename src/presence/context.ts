import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from '../config.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import type { Callers } from '../upstream/callers.js';
import type { UpstreamClient } from '../upstream/client.js';
import type { EmailTable } from '../upstream/large-answers.js';
import type { FeatureLevels } from '../upstream/feature-level.js';
import type { UserDirectory } from '../upstream/user-directory.js';
import type { PresenceColumns } from './columns.js';
import type { PresenceEra } from './convert.js';
import type { PresenceStore } from './ledger-store.js';
import type { ClusterSnapshots, SnapshotHub } from './snapshots.js';
import type { PresenceState } from './state.js';

/** B7: reads a full presence answer into columns off the main thread (src/parse/), handing its bytes back. */
export interface PresenceParser {
  presenceAnswer(bytes: Buffer, era: PresenceEra | undefined, table?: EmailTable): Promise<{ columns: PresenceColumns; bytes: Buffer }>;
}

/** What the presence poll and the register's presence use: the shim's context, as far as presence reaches. */
export interface PresenceContext {
  config: Config;
  log: Logger;
  /** The upstream's identity: part of every realm key. */
  upstreamId: string;
  client: UpstreamClient;
  featureLevels: FeatureLevels;
  /** Realm presence ledgers (memory, or Redis for replicas). */
  store: PresenceStore;
  /** P9: shared presence snapshots in this process… */
  snapshots: SnapshotHub;
  /** …and across replicas (Redis), when there are several. */
  clusterSnapshots?: ClusterSnapshots | undefined;
  presence: PresenceState;
  parser: PresenceParser;
  metrics: Metrics;
  /** The realm's user list: email → id for 2.1's answers, date_joined for users never active. */
  users: UserDirectory;
  /** Who a caller is (P15: whose report is recorded). */
  callers: Callers;
}

export type PresenceHandler = (req: IncomingMessage, res: ServerResponse, ctx: PresenceContext) => Promise<void>;
