import { isSuccess } from '../http/relay.js';
import type { BufferedResponse } from '../upstream/client.js';
import { callerKey } from '../upstream/realm.js';
import { answersWithDelta, type LedgerState } from './ledger.js';
import { loadLedger, readPresenceAnswer, takeInAnswer, upstreamTime, type Format } from './intake.js';
import { wantsModern } from './params.js';
import { report, UpstreamRefused, type Poll } from './report.js';
import { everyCallerSeesTheSameUsers, fromData, toData, type ClusterSnapshots, type Snapshot } from './snapshots.js';

/**
 * P9, single flight and sharing: which snapshot a full poll is answered from, and who fetches
 * it. In this process one fetch per scope per window (SnapshotHub); across replicas (S1) the
 * replica that takes the scope's lock fetches and publishes, the others wait for a notification
 * and read it once. Every caller's own report reaches the upstream first, and only a caller the
 * upstream accepted sees shared data.
 */

/** A replica's fetch holds the others at least this long (ms) before they fetch themselves. */
const FETCH_BUDGET_FLOOR_MS = 5_000;

/** The snapshot a poll is answered from, and the caller's own upstream report (for its headers). */
export interface Obtained {
  snapshot: Snapshot;
  own: BufferedResponse | undefined;
}

/** P9: a scope is a realm and a format, or one caller of it where callers may see different users. */
function scopeOf(poll: Poll, format: Format): { scope: string; shared: boolean } {
  const { ctx, featureLevel, realm, req } = poll;
  const shared = everyCallerSeesTheSameUsers(ctx.config.presence.shareSnapshots, featureLevel);
  return { scope: shared ? `${realm.key}|${format}` : `${realm.key}|${format}|${callerKey(req.headers)}`, shared };
}

/** Throws UpstreamRefused when the upstream did not accept the caller's report (E1). */
export async function obtainSnapshot(poll: Poll, format: Format): Promise<Obtained> {
  const obtained = await sharedOrFetched(poll, format);
  return wantsModern(poll.request) ? obtained : withLegacyBytes(poll, format, obtained);
}

async function sharedOrFetched(poll: Poll, format: Format): Promise<Obtained> {
  const { ctx } = poll;
  const { scope, shared } = scopeOf(poll, format);
  const hub = ctx.snapshots;
  const fresh = hub.fresh(scope);
  const pending = fresh ? undefined : hub.pending(scope);
  let own: BufferedResponse | undefined;
  if (fresh || pending) {
    own = await acceptedPing(poll);
    const now = fresh ?? (shared ? await answerableDuringRefresh(poll) : undefined);
    if (now) {
      ctx.metrics.presenceSnapshots.inc({ source: 'shared' });
      return { snapshot: now, own };
    }
    // A failed fetch is its leader's to report; this caller then fetches for itself below.
    const snapshot = await pending!.catch(() => undefined);
    if (snapshot) {
      ctx.metrics.presenceSnapshots.inc({ source: 'shared' });
      return { snapshot, own };
    }
  }
  let leaderAnswer: BufferedResponse | undefined;
  const snapshot = await hub.lead(
    scope,
    async () => {
      const fetched = await fetchShared(poll, format, shared, scope);
      leaderAnswer = fetched.own;
      return fetched.snapshot;
    },
    shared,
  );
  return { snapshot, own: leaderAnswer ?? own };
}

/**
 * B7: the snapshot a poll is answered from at once while its scope's refresh is pending, or
 * undefined when it must wait for the refresh. Only a delta poll (P3) on a shared scope whose
 * `last_update_id` the newest ledger copy this process holds vouches for (I2), after its own report
 * succeeded (P9): its answer holds every change after its id that the ledger has, so nothing
 * it gets is older than what it holds (X1, P6), and what the refresh brings has larger ids, so
 * its next poll gets it (P6). The users in view are the ledger's, as of its newest complete
 * snapshot (I5): the view any caller in that snapshot's window got, not older, as P7 allows
 * for a shared snapshot. A full poll (no id, or one not vouched for) waits: it replaces the
 * client's whole map (P3), and its snapshot's window is over (otherwise there would be no
 * refresh), so only the refresh is the view "at that moment" P7 asks for, and P9's single
 * flight makes the others wait for it.
 * S1: an id above this process's copy (issued by another replica since it last read) is
 * looked up in the store first, one small read of the changes since: a client whose polls
 * alternate between replicas is then not held up by every refresh.
 */
async function answerableDuringRefresh(poll: Poll): Promise<Snapshot | undefined> {
  const { ctx, realm, request } = poll;
  const id = request.lastUpdateId;
  if (id === undefined || id <= 0 || !wantsModern(request)) return undefined;
  let ledger = ctx.store.peek(realm.key);
  if (ledger && id > ledger.lastId) ledger = (await loadLedger(poll)) ?? ledger;
  if (!ledger || ledger.completeAt <= 0 || !answersWithDelta(ledger, id)) return undefined;
  let snapshot = snapshotsOfLedgers.get(ledger);
  if (!snapshot) {
    // P10: the upstream's time of the newest complete snapshot the ledger holds.
    snapshot = {
      serverTimestamp: ledger.completeAt,
      fetchedAt: 0,
      complete: true,
      modern: undefined,
      ledger,
      bodies: ctx.snapshots.bodies(),
    };
    snapshotsOfLedgers.set(ledger, snapshot);
  }
  return snapshot;
}

/**
 * The snapshot `answerableDuringRefresh` makes of a ledger state: derived from the state alone,
 * so every poll answered from it during a refresh shares one (and one empty body cache).
 */
const snapshotsOfLedgers = new WeakMap<LedgerState, Snapshot>();

/**
 * A legacy poll answered from a snapshot another replica published: its upstream bytes, read
 * once per snapshot (a replica whose callers all poll in the modern format never reads them).
 * When they are gone (the store failed, or the poll came after they expired) the caller
 * fetches for itself, as every caller does while the store is down.
 */
async function withLegacyBytes(poll: Poll, format: Format, obtained: Obtained): Promise<Obtained> {
  const { snapshot } = obtained;
  if (snapshot.legacyBytes || !snapshot.readLegacyBytes) return obtained;
  let reading = legacyReads.get(snapshot);
  if (!reading) {
    reading = snapshot
      .readLegacyBytes()
      .catch(() => undefined) // counted by the store
      .then((bytes) => {
        if (!bytes) return undefined;
        snapshot.legacyBytes = bytes;
        snapshot.readLegacyBytes = undefined;
        poll.ctx.snapshots.resized(scopeOf(poll, format).scope);
        return bytes;
      });
    legacyReads.set(snapshot, reading);
  }
  if (await reading) return obtained;
  legacyReads.delete(snapshot); // the next legacy poll tries again
  return fetchFromUpstream(poll, format, true);
}

const legacyReads = new WeakMap<Snapshot, Promise<Buffer | undefined>>();

/** P9: the caller's own report as a ping; throws UpstreamRefused unless the upstream accepted it. */
async function acceptedPing(poll: Poll): Promise<BufferedResponse> {
  const own = await report(poll, { ping_only: 'true' });
  if (!isSuccess(own.status)) throw new UpstreamRefused(own);
  return own;
}

/** One fetch for the scope: another replica's snapshot when one has or is being fetched, else the upstream's. */
async function fetchShared(poll: Poll, format: Format, shared: boolean, scope: string): Promise<Obtained> {
  const window = poll.ctx.config.presence.coalesceMs;
  const cluster = shared && window > 0 ? poll.ctx.clusterSnapshots : undefined;
  if (!cluster) return fetchFromUpstream(poll, format, shared);
  const followed = await follow(poll, cluster, scope);
  if (followed) return followed;
  try {
    const fetched = await fetchFromUpstream(poll, format, shared);
    const remainingMs = window - (Date.now() - fetched.snapshot.fetchedAt);
    // The store counts its own errors (store_errors_total); the other replicas then fetch for
    // themselves, which costs the upstream more calls but keeps every P-rule.
    await cluster.publish(scope, toData(fetched.snapshot), remainingMs).catch(() => undefined);
    return fetched;
  } catch (e) {
    // Same: the lock then expires at the end of the window instead of now.
    await cluster.release(scope).catch(() => undefined);
    throw e;
  }
}

/**
 * S1/P9 across replicas: the snapshot another replica published in this window, or the one it
 * is fetching, woken when it is published. Undefined: this replica holds the lock and fetches.
 */
async function follow(poll: Poll, cluster: ClusterSnapshots, scope: string): Promise<Obtained | undefined> {
  const { ctx } = poll;
  const window = ctx.config.presence.coalesceMs;
  // Store unreachable (counted by the store): no sharing between replicas meanwhile, each
  // replica fetches for itself.
  let published = await cluster.get(scope).catch(() => undefined);
  // How long one replica's fetch may hold the others (X3: never past the upstream deadline): a
  // fetch of a large realm can outlast a short window, and a waiter that gave up early would
  // fetch the same snapshot a second time.
  const fetchBudgetMs = Math.min(ctx.config.upstream.timeoutMs, Math.max(window, FETCH_BUDGET_FLOOR_MS));
  const locked = published ? false : await cluster.tryLock(scope, fetchBudgetMs).catch(() => true);
  if (!published && locked) return undefined;
  const own = await acceptedPing(poll);
  // A wait that fails (store gone) or times out: this caller fetches for itself, as above.
  published ??= await cluster.waitFor(scope, fetchBudgetMs).catch(() => undefined);
  if (!published) return undefined;
  const snapshot = fromData(published.data, published.remainingMs, window, Date.now(), ctx.snapshots.bodies());
  // The publisher merged it into the store's ledger: read that once, so answers include it (X1).
  snapshot.ledger = await loadLedger(poll);
  if (!snapshot.ledger) return undefined; // the store went away meanwhile: nothing to answer from but our own fetch
  ctx.metrics.presenceSnapshots.inc({ source: 'shared' });
  return { snapshot, own };
}

/** The caller's own full report: the upstream's presence, taken into the ledger. */
async function fetchFromUpstream(poll: Poll, format: Format, complete: boolean): Promise<Obtained> {
  const { ctx } = poll;
  const own = await report(poll, { ping_only: 'false', slim_presence: format === 'slim' ? 'true' : undefined });
  if (!isSuccess(own.status)) throw new UpstreamRefused(own);
  ctx.metrics.presenceSnapshots.inc({ source: 'upstream' });
  // B7: parsed and converted off the main thread; only the columns come back.
  const { columns: presences, bytes } = await readPresenceAnswer(poll, format, own.body);
  const serverTimestamp = upstreamTime(presences.top, own.headers);
  const intake = await takeInAnswer(poll, format, presences, serverTimestamp, complete);
  const snapshot: Snapshot = {
    serverTimestamp,
    // The window starts once the snapshot can be answered from: a slow parse or merge must not eat it.
    fetchedAt: Date.now(),
    complete,
    modern: intake.modern,
    modernError: intake.modernError,
    legacyBytes: format === 'legacy' ? bytes : undefined,
    legacyUsers: format === 'legacy' ? presences.keys : undefined,
    ledger: intake.ledger,
    bodies: ctx.snapshots.bodies(),
  };
  return { snapshot, own };
}
