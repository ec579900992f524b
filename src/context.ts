import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from './config.js';
import type { Logger } from './observability/logger.js';
import type { Metrics } from './observability/metrics.js';
import type { UpstreamClient } from './upstream/client.js';
import type { ClusterSnapshots, SnapshotHub } from './presence/snapshots.js';
import type { PresenceState } from './presence/state.js';
import type { PresenceStore } from './store/types.js';
import type { FeatureLevels } from './upstream/feature-level.js';
import type { UserDirectory } from './upstream/user-directory.js';

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
  /** What the presence poll derives and remembers beside the ledgers and snapshots. */
  presence: PresenceState;
  metrics: Metrics;
  /** The realm's user list (GET /users), cached per realm: email ↔ user_id, own-profile rows. */
  users: UserDirectory;
}

export type Handler = (req: IncomingMessage, res: ServerResponse, ctx: ShimContext) => Promise<void>;

/** Per-request facts for the request log line. */
export interface RequestFacts {
  upstreamMs?: number;
  realm?: string;
  featureLevel?: number;
  kind?: string;
}

const FACTS = Symbol('zulip-compat-shim request facts');

export function facts(req: IncomingMessage): RequestFacts {
  const r = req as IncomingMessage & { [FACTS]?: RequestFacts };
  r[FACTS] ??= {};
  return r[FACTS];
}

/** The request's facts so far, without adding any (the log line reads them). */
export function factsOf(req: IncomingMessage): RequestFacts {
  return (req as IncomingMessage & { [FACTS]?: RequestFacts })[FACTS] ?? NO_FACTS;
}

const NO_FACTS: RequestFacts = Object.freeze({});

/** Times an upstream call and adds it to the request's upstream time. */
export async function timedUpstream<T>(req: IncomingMessage, call: () => Promise<T>): Promise<T> {
  const start = performance.now();
  try {
    return await call();
  } finally {
    const f = facts(req);
    f.upstreamMs = (f.upstreamMs ?? 0) + Math.round(performance.now() - start);
  }
}
