import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from '../config/index.js';
import type { Logger } from '../observability/logger.js';
import type { Metrics } from '../observability/metrics.js';
import type { Callers } from '../upstream/callers.js';
import type { UpstreamClient } from '../upstream/client.js';
import type { Realm } from '../upstream/realm.js';
import type { EmailTable } from '../upstream/large-answers.js';
import type { FeatureLevels } from '../upstream/feature-level.js';
import type { RealmAdmission } from '../upstream/realm-admission.js';
import type { UserDirectory } from '../upstream/user-directory.js';
import type { PresenceColumns } from './columns.js';
import type { PresenceEra } from './convert.js';
import type { PresenceStore } from './ledger-store.js';
import type { ReplicaSnapshots, SnapshotHub } from './snapshots.js';
import type { PresenceState } from './state.js';

/** B7: reads a full presence answer into columns off the main thread (src/parse/), handing its bytes back. */
export interface PresenceParser {
  presenceAnswer(bytes: Buffer, era: PresenceEra | undefined, table?: EmailTable): Promise<{ columns: PresenceColumns; bytes: Buffer }>;
}

/**
 * What the presence poll and the register's presence use: the shim's shared parts, as far as
 * presence reaches (context.ts adds the rest for every other handler).
 */
export interface PresenceContext {
  config: Config;
  log: Logger;
  /** The upstream's identity (its configured URL, or `replay:` + file): part of every realm key. */
  upstreamId: string;
  client: UpstreamClient;
  featureLevels: FeatureLevels;
  /** X12: realms new to the shim are taken on once the upstream accepts a caller for them, at a bounded rate. */
  admission: RealmAdmission;
  /** Realm presence ledgers (memory, or Redis for replicas). */
  store: PresenceStore;
  /** P9: shared presence snapshots in this process… */
  snapshots: SnapshotHub;
  /** …and across replicas (Redis), when there are several. */
  replicaSnapshots?: ReplicaSnapshots | undefined;
  /** What the presence poll derives and remembers beside the ledgers and snapshots. */
  presence: PresenceState;
  parser: PresenceParser;
  metrics: Metrics;
  /** The realm's user list (GET /users), cached per realm: email ↔ user_id, date_joined, own-profile rows. */
  users: UserDirectory;
  /** Who a caller is (their GET /users/me), cached per credentials (V2, P15). */
  callers: Callers;
}

export type PresenceHandler = (req: IncomingMessage, res: ServerResponse, ctx: PresenceContext) => Promise<void>;

/** Who is asking, about which realm, on which era. */
export interface Asker {
  ctx: PresenceContext;
  req: IncomingMessage;
  realm: Realm;
  era: PresenceEra;
}
