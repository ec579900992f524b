import { timedUpstream } from '../observability/request-facts.js';
import { isRefused, isSuccess, type Refused } from '../upstream/relay.js';
import type { ArrivingResponse, UpstreamHead } from '../upstream/client.js';
import { callerKey } from '../upstream/realm.js';
import { readPresenceAnswer, takeInAnswer, type Format } from './intake.js';
import { heldLedger, loadLedger } from './ledger-io.js';
import { upstreamTime } from './upstream-time.js';
import type { LedgerState } from './ledger.js';
import { wantsModern } from './params.js';
import { Leader, planDuringRefresh, planLeader, planReplicaSource, planStart, pollPolicy, viewOf, type PollPolicy } from './plan.js';
import { fullReport, report, type Poll } from './report.js';
import {
  everyCallerSeesTheSameUsers,
  fromData,
  toData,
  within,
  type ReplicaSnapshots,
  type PublishedSnapshot,
  type Snapshot,
} from './snapshots.js';

/**
 * P9, single flight and sharing: which snapshot a full poll is answered from, and who fetches
 * it. In this process one fetch per scope per window (SnapshotHub); across replicas (S1) the
 * replica that takes the scope's lock fetches and publishes, the others wait for a notification
 * and read it once. Every caller's own report reaches the upstream first, and only a caller the
 * upstream accepted sees shared data. A refresh goes on after its leader's own report was
 * accepted; a delta poll the ledger vouches for is answered then, the leader's as any other (B7).
 */

/** A replica's fetch holds the others at least this long (ms) before they fetch themselves. */
const FETCH_BUDGET_FLOOR_MS = 5_000;

/** The snapshot a poll is answered from, and the head of the caller's own upstream report (for its headers). */
export interface Obtained {
  snapshot: Snapshot;
  own: UpstreamHead | undefined;
}

/** A refresh that was not accepted is, to the others waiting for it, a failed one (they then lead their own). */
function failedRefresh(r: Refused): Promise<never> {
  return Promise.reject(new Error(`upstream answered ${r.refused.status}`));
}

/**
 * A refresh under way once its leader's own report was accepted (P9): that report's head, and
 * the snapshot it brings, settled once taken in (B7: at 100k users the upstream answers in
 * milliseconds, reading and taking in its answer takes seconds). The snapshot is Refused where
 * the leader's report, sent again in full, was not accepted (`fetchShared`).
 */
interface Refresh {
  own: UpstreamHead;
  snapshot: Promise<Snapshot | Refused>;
  /**
   * The snapshot is another replica's fetch, still under way when this one's leader joined it:
   * the leader's own report was a ping, which that fetch may not hold either.
   */
  followsFetch?: boolean;
}

/** P9, S1, B7: the poll's sharing rule, computed once (plan.ts). */
function policyOf(poll: Poll, format: Format): PollPolicy {
  const { ctx, featureLevel, realm, req } = poll;
  const { shareSnapshots, coalesceMs, leaderWaitMs } = ctx.config.presence;
  return pollPolicy({
    everyCallerSeesTheSameUsers: everyCallerSeesTheSameUsers(shareSnapshots, featureLevel),
    coalesceMs,
    leaderWaitMs,
    lastFetchMs: (scope) => ctx.presence.fetchTimes.get(scope),
    replicas: ctx.replicaSnapshots !== undefined,
    realmKey: realm.key,
    format,
    caller: () => callerKey(req.headers),
  });
}

/** The snapshot the poll is answered from, or Refused when the upstream did not accept the caller's report (E1). */
export async function obtainSnapshot(poll: Poll, format: Format): Promise<Obtained | Refused> {
  const policy = policyOf(poll, format);
  const modern = wantsModern(poll.request);
  // X2: from now on this realm's snapshots keep the legacy answer for its window.
  if (!modern) poll.ctx.presence.legacyPolled.set(poll.realm.key, true);
  const obtained = await sharedOrFetched(poll, format, policy);
  return modern || isRefused(obtained) ? obtained : withLegacyBytes(poll, format, policy, obtained);
}

/** The interpreter of plan.ts's steps for one full poll. */
async function sharedOrFetched(poll: Poll, format: Format, policy: PollPolicy): Promise<Obtained | Refused> {
  const { ctx } = poll;
  const hub = ctx.snapshots;
  const fresh = freshFor(poll, hub.fresh(policy.scope));
  const pending = fresh ? undefined : hub.pending(policy.scope);
  const start = planStart({ fresh: fresh !== undefined, pending: pending !== undefined });
  if (start !== 'lead') {
    const own = await acceptedPing(poll);
    if (isRefused(own)) return own;
    const now = start === 'fromFresh' ? fresh : policy.shared ? await answerableDuringRefresh(poll) : undefined;
    if (now) {
      ctx.metrics.presenceSnapshots.inc({ source: 'shared' });
      return { snapshot: now, own };
    }
    // A failed fetch is its leader's to report; this caller then leads one of its own.
    const snapshot = await pending!.catch(() => undefined);
    if (snapshot) {
      ctx.metrics.presenceSnapshots.inc({ source: 'shared' });
      return { snapshot, own };
    }
  }
  return lead(poll, format, policy);
}

/**
 * S3: a snapshot of the window, unless a register answer gave a client newer presences as the
 * upstream sent them (the store was away, so no ledger holds them): that client may be this
 * caller, and the snapshot would take it back in time (X1). A refresh is newer.
 */
function freshFor(poll: Poll, snapshot: Snapshot | undefined): Snapshot | undefined {
  return snapshot && !poll.ctx.presence.storeAway.handedOutAfter(poll.realm.key, snapshot.serverTimestamp) ? snapshot : undefined;
}

/** This caller's full report is the scope's refresh (P9 single flight); answered as planLeader says (B7). */
async function lead(poll: Poll, format: Format, policy: PollPolicy): Promise<Obtained | Refused> {
  const leader = new Leader();
  const started = performance.now();
  const refresh = fetchShared(poll, format, policy, leader);
  const shared = () =>
    refresh.then((r) => (isRefused(r) ? failedRefresh(r) : r.snapshot.then((s) => (isRefused(s) ? failedRefresh(s) : s))));
  const snapshot = poll.ctx.snapshots.lead(policy.scope, shared, policy.shared);
  // B7: how long this refresh took is how long the scope's next leader may wait for its own.
  snapshot.then(
    () => poll.ctx.presence.fetchTimes.set(policy.scope, performance.now() - started),
    () => undefined,
  );
  // A refused or failed report reaches the leader through `refresh`; a failure after it, through
  // its snapshot below while the leader waits, and the waiters' own fetches once it has its answer.
  snapshot.catch(() => undefined);
  const r = await refresh;
  if (isRefused(r)) return r;
  const { own, followsFetch } = r;
  const obtained = (s: Snapshot | Refused): Obtained | Refused => (isRefused(s) ? s : { snapshot: s, own });
  const plan = planLeader(policy, followsFetch === true);
  if (plan.wait === 'wholeRefresh') return obtained(await r.snapshot);
  const taken = plan.waitMs === undefined ? undefined : await within(r.snapshot, plan.waitMs);
  if (taken) return obtained(taken);
  const now = await answerableDuringRefresh(poll);
  if (now && leader.answer()) {
    snapshot.catch((e: unknown) => refreshFailed(poll, e));
    return { snapshot: now, own };
  }
  return obtained(await r.snapshot);
}

/** A refresh that failed after its leader had its answer: nobody else reports it. */
function refreshFailed(poll: Poll, e: unknown): void {
  poll.ctx.log.warn(
    { realm: poll.realm.host, err: e },
    'presence refresh failed after its leader was answered: the next poll fetches again',
  );
}

/**
 * B7: the snapshot a poll is answered from at once while its scope's refresh is pending (also the
 * poll whose own report is the refresh), or undefined when it must wait for the refresh. Only a
 * delta poll (P3) on a shared scope whose `last_update_id` the newest ledger copy this process
 * holds vouches for (I2), after its own report succeeded (P9): its answer holds every change after
 * its id that the ledger has, so nothing it gets is older than what it holds (X1, P6), and what
 * the refresh brings has larger ids, so its next poll gets it (P6). The users in view are the
 * ledger's, as of its newest complete snapshot (I5): the view any caller in that snapshot's window
 * got, not older, as P7 allows for a shared snapshot. A full poll (no id, or one not vouched for)
 * waits: it replaces the client's whole map (P3), and its snapshot's window is over (otherwise
 * there would be no refresh), so only the refresh is the view "at that moment" P7 asks for, and
 * P9's single flight makes the others wait for it.
 * S1: an id above this process's copy (issued by another replica since it last read) is looked up
 * in the store first, one small read of the changes since: a client whose polls alternate between
 * replicas is then not held up by every refresh.
 */
export async function answerableDuringRefresh(poll: Poll): Promise<Snapshot | undefined> {
  const { ctx, realm, request } = poll;
  const id = { lastUpdateId: request.lastUpdateId, modern: wantsModern(request) };
  // S3: every copy of the ledger lacks what this process took in while the store was away.
  const view = (l: LedgerState | undefined) => l && viewOf(l, id.lastUpdateId, ctx.presence.storeAway.ledgerBehind(realm.key));
  let ledger = heldLedger(poll);
  let step = planDuringRefresh(id, view(ledger), false);
  if (step === 'readStore') {
    ledger = (await loadLedger(poll)) ?? ledger;
    step = planDuringRefresh(id, view(ledger), true);
  }
  if (step !== 'answer' || !ledger) return undefined;
  // Derived from the state alone: every poll answered from it during a refresh shares one (and one body cache).
  const memo = ctx.presence.memo(ledger);
  if (!memo.snapshot) {
    // P10: the upstream's time of the newest complete snapshot the ledger holds.
    memo.snapshot = {
      serverTimestamp: ledger.completeAt,
      fetchedAt: 0,
      complete: true,
      modern: undefined,
      merged: new WeakRef(ledger),
      bodies: ctx.snapshots.bodies(),
    };
  }
  return memo.snapshot;
}

/**
 * A legacy poll answered from a snapshot another replica published: its upstream bytes, read
 * once per snapshot (a replica whose callers all poll in the modern format never reads them).
 * When they are gone (the store failed, or the poll came after they expired), or were not kept
 * (the realm had no legacy poll before, X2), the caller fetches for itself, as every caller does
 * while the store is down.
 */
async function withLegacyBytes(poll: Poll, format: Format, policy: PollPolicy, obtained: Obtained): Promise<Obtained | Refused> {
  const { snapshot } = obtained;
  if (snapshot.legacyBytes) return obtained;
  if (!snapshot.readLegacyBytes) return fetchedForItself(poll, format, policy);
  let reading = snapshot.legacyRead;
  if (!reading) {
    reading = snapshot
      .readLegacyBytes()
      .catch(() => undefined) // counted by the store
      .then((bytes) => {
        if (!bytes) return undefined;
        snapshot.legacyBytes = bytes;
        snapshot.readLegacyBytes = undefined;
        poll.ctx.snapshots.resized(policy.scope);
        return bytes;
      });
    snapshot.legacyRead = reading;
  }
  if (await reading) return obtained;
  snapshot.legacyRead = undefined; // the next legacy poll tries again
  return fetchedForItself(poll, format, policy);
}

/**
 * A legacy poll's own full fetch, where the snapshot it shares has no legacy answer to give; the
 * scope's snapshot from then on (it holds one), so the next legacy polls of the window share it.
 */
async function fetchedForItself(poll: Poll, format: Format, policy: PollPolicy): Promise<Obtained | Refused> {
  const fetched = await fetchFromUpstream(poll, format, true);
  if (isRefused(fetched)) return fetched;
  const snapshot = await poll.ctx.snapshots.lead(policy.scope, () => fetched.snapshot, policy.shared);
  return { snapshot, own: fetched.own };
}

/** P9: the caller's own report as a ping: its head once the upstream accepted it, else Refused. */
async function acceptedPing(poll: Poll): Promise<UpstreamHead | Refused> {
  const own = await report(poll, { ping_only: 'true' });
  if (!isSuccess(own.status)) return { refused: own };
  return { status: own.status, headers: own.headers };
}

/**
 * One fetch for the scope: another replica's snapshot when one has been or is being fetched
 * (planReplicaSource), else the upstream's. Resolved once the leader's own report was accepted.
 */
async function fetchShared(poll: Poll, format: Format, policy: PollPolicy, leader: Leader): Promise<Refresh | Refused> {
  const { ctx } = poll;
  const replicas = ctx.replicaSnapshots;
  if (!policy.acrossReplicas || !replicas) return fetchFromUpstream(poll, format, policy.shared);
  const { scope } = policy;
  // Store unreachable (counted by the store): no sharing between replicas meanwhile, each
  // replica fetches for itself.
  const published = await replicas.get(scope).catch(() => undefined);
  // How long one replica's fetch may hold the others (X3: never past the upstream deadline): a
  // fetch of a large realm can outlast a short window, and a waiter that gave up early would
  // fetch the same snapshot a second time.
  const fetchBudgetMs = Math.min(ctx.config.upstream.timeoutMs, Math.max(ctx.config.presence.coalesceMs, FETCH_BUDGET_FLOOR_MS));
  const locked = published ? false : await replicas.tryLock(scope, fetchBudgetMs).catch(() => true);
  const source = planReplicaSource({ published: published !== undefined, locked });
  if (source === 'fetchAndPublish') return fetchAndPublish(poll, replicas, format, scope);
  const own = await acceptedPing(poll);
  if (isRefused(own)) return own;
  const snapshot = readPublished(poll, replicas, scope, published, fetchBudgetMs).then(async (read): Promise<Snapshot | Refused> => {
    if (read) return read;
    // Its report was a ping: sent again in full while its client waits, never once it has its answer (P9).
    if (!leader.reportAgain()) throw new Error('the replica fetching the shared presence snapshot gave up');
    const again = await fetchAndPublish(poll, replicas, format, scope);
    return isRefused(again) ? again : again.snapshot;
  });
  return { own, snapshot, followsFetch: source === 'followFetch' };
}

/** S1: this replica's own fetch for the scope, published to the others once taken in. */
async function fetchAndPublish(poll: Poll, replicas: ReplicaSnapshots, format: Format, scope: string): Promise<UpstreamRefresh | Refused> {
  const window = poll.ctx.config.presence.coalesceMs;
  // A failed fetch: the lock then expires at the end of the window instead of now.
  const release = () => replicas.release(scope).catch(() => undefined);
  let fetched: UpstreamRefresh | Refused;
  try {
    fetched = await fetchFromUpstream(poll, format, true);
  } catch (e) {
    await release();
    throw e;
  }
  if (isRefused(fetched)) {
    await release();
    return fetched;
  }
  const snapshot = fetched.snapshot.then(
    async (snapshot) => {
      // S3: not in the store's ledger, which followers answer from: they fetch for themselves.
      if (snapshot.storeAway) {
        await release();
        return snapshot;
      }
      const remainingMs = window - (Date.now() - snapshot.fetchedAt);
      // The store counts its own errors (store_errors_total); the other replicas then fetch for
      // themselves, which costs the upstream more calls but keeps every P-rule.
      await replicas.publish(scope, toData(snapshot), remainingMs).catch(() => undefined);
      return snapshot;
    },
    async (e: unknown) => {
      await release();
      throw e;
    },
  );
  return { own: fetched.own, snapshot };
}

async function readPublished(
  poll: Poll,
  replicas: ReplicaSnapshots,
  scope: string,
  published: PublishedSnapshot | undefined,
  fetchBudgetMs: number,
): Promise<Snapshot | undefined> {
  const { ctx } = poll;
  // A wait that fails (store gone) or times out: this caller fetches for itself, as above.
  published ??= await replicas.waitFor(scope, fetchBudgetMs).catch(() => undefined);
  if (!published) return undefined;
  const snapshot = fromData(published.data, published.remainingMs, ctx.config.presence.coalesceMs, Date.now(), ctx.snapshots.bodies());
  // The publisher merged it into the store's ledger: read that once, so answers include it (X1).
  const ledger = await loadLedger(poll);
  if (!ledger) return undefined; // the store went away meanwhile: nothing to answer from but our own fetch
  snapshot.merged = new WeakRef(ledger);
  ctx.metrics.presenceSnapshots.inc({ source: 'shared' });
  return snapshot;
}

/** A refresh from the upstream itself: always a snapshot once its report was accepted. */
interface UpstreamRefresh extends Refresh {
  snapshot: Promise<Snapshot>;
}

/**
 * The caller's own full report, resolved once the upstream accepted it (E1: a refusal is
 * Refused, its body read); the upstream's presence is then read and taken into the ledger.
 */
async function fetchFromUpstream(poll: Poll, format: Format, complete: boolean): Promise<UpstreamRefresh | Refused> {
  const answer = await fullReport(poll, format === 'slim' ? 'true' : undefined);
  const own = { status: answer.status, headers: answer.headers };
  if (!isSuccess(own.status)) return { refused: { ...own, body: await timedUpstream(poll.req, () => answer.body) } };
  poll.ctx.metrics.presenceSnapshots.inc({ source: 'upstream' });
  return { own, snapshot: takenIn(poll, format, complete, answer) };
}

/** An accepted full report's presence, taken into the ledger: the scope's next snapshot. */
async function takenIn(poll: Poll, format: Format, complete: boolean, answer: ArrivingResponse): Promise<Snapshot> {
  const { ctx } = poll;
  const body = await timedUpstream(poll.req, () => answer.body);
  // B7: parsed and converted off the main thread; only the columns come back.
  const { columns: presences, bytes } = await readPresenceAnswer(poll, format, body);
  // X13: only a server with the modern presence API sends this; the realm was upgraded.
  if ('presence_last_update_id' in presences.top) ctx.featureLevels.raised(poll.realm, undefined);
  const serverTimestamp = upstreamTime(presences.top, answer.headers);
  const intake = await takeInAnswer(poll, format, presences, serverTimestamp, complete);
  // X2: the upstream's legacy answer is kept for the window only where legacy polls come, where
  // it could not be converted (a legacy answer is all it is good for), or where replicas share
  // snapshots (S1: published for the others' legacy polls); modern answers are made from the ledger.
  const keepLegacy =
    format === 'legacy' &&
    (!wantsModern(poll.request) ||
      intake.modernError !== undefined ||
      ctx.replicaSnapshots !== undefined ||
      ctx.presence.legacyPolled.has(poll.realm.key));
  return {
    serverTimestamp,
    // The window starts once the snapshot can be answered from: a slow parse or merge must not eat it.
    fetchedAt: Date.now(),
    complete,
    modern: intake.modern,
    modernError: intake.modernError,
    legacyBytes: keepLegacy ? bytes : undefined,
    legacyUsers: format === 'legacy' ? presences.keys : undefined,
    merged: intake.ledger && new WeakRef(intake.ledger),
    storeAway: intake.storeAway,
    bodies: ctx.snapshots.bodies(),
  };
}
