/**
 * The presence poll's decisions, as pure functions of what the poll knows (P9, X1, S1, B7):
 * whether a poll is answered from a snapshot in its window, joins a refresh under way or leads
 * one; where a refresh comes from (the upstream, or another replica's fetch); how long a leader
 * waits for its own refresh; whether a delta poll is answered from the ledger during a refresh;
 * which ledger an answer is built from, delta or full, counter raised or not; and a refresh
 * leader's three states (Leader: answered early or reporting again, never both). The
 * interpreter (sharing.ts, answers.ts) runs these steps against the store, the upstream and the
 * replicas' snapshots; nothing here waits, reads or writes.
 */

import { answersWithDelta, type LedgerState } from './ledger.js';

/** A scope's sharing rule, computed once per poll (P9, S1, B7). */
export interface PollPolicy {
  /** The scope whose snapshots the poll shares: a realm and a format, or one caller of it. */
  scope: string;
  /** Every caller of the realm sees the same users: one snapshot serves them all (P9). */
  shared: boolean;
  /**
   * `presence.coalesceMs` > 0: a snapshot serves the rest of its window, a refresh's leader may
   * be answered before the refresh ends (B7), and replicas share fetches (S1). 0 turns all of
   * that off: every poll fetches for itself.
   */
  windowed: boolean;
  /** S1: replicas fetch the scope once between them (shared, windowed, and replicas share a store). */
  acrossReplicas: boolean;
  /**
   * B7: how long a refresh's leader waits for it before a delta poll is answered from the
   * ledger: `presence.leaderWaitMs`, or as long as the scope's last refresh took (a large
   * realm's), up to LEADER_WAIT_CAP_MS.
   */
  leaderWaitMs: number;
}

/**
 * B7: the longest a refresh holds its leader. A large realm's refresh (seconds at 100k users)
 * then still reaches the poll that started it when it takes about as long as the last one did;
 * a refresh far slower than that (an upstream in trouble) holds no poll longer than this.
 */
export const LEADER_WAIT_CAP_MS = 3_000;

/** A refresh taking up to this much longer than the scope's last one is still waited for. */
const FETCH_TIME_MARGIN = 1.25;

export interface PolicyInput {
  /** P9: the operator's `presence.shareSnapshots`, and the realm's feature level. */
  everyCallerSeesTheSameUsers: boolean;
  coalesceMs: number;
  leaderWaitMs: number;
  /** How long the scope's last refresh took (ms), if this process saw one. */
  lastFetchMs?: ((scope: string) => number | undefined) | undefined;
  /** Replicas coordinate through a shared store. */
  replicas: boolean;
  realmKey: string;
  format: string;
  /** The caller's key (P13: never its credentials); asked only for a per-caller scope. */
  caller: () => string;
}

export function pollPolicy(i: PolicyInput): PollPolicy {
  const shared = i.everyCallerSeesTheSameUsers;
  const windowed = i.coalesceMs > 0;
  const scope = shared ? `${i.realmKey}|${i.format}` : `${i.realmKey}|${i.format}|${i.caller()}`;
  return {
    scope,
    shared,
    windowed,
    acrossReplicas: shared && windowed && i.replicas,
    leaderWaitMs: leaderWait(i.leaderWaitMs, i.lastFetchMs?.(scope)),
  };
}

/** B7: the configured wait, or the scope's last refresh time with a margin, capped. */
export function leaderWait(configuredMs: number, lastFetchMs: number | undefined): number {
  if (lastFetchMs === undefined || configuredMs >= LEADER_WAIT_CAP_MS) return configuredMs;
  return Math.max(configuredMs, Math.min(LEADER_WAIT_CAP_MS, Math.ceil(lastFetchMs * FETCH_TIME_MARGIN)));
}

/** What this process holds for the scope as a full poll arrives. */
export interface ScopeView {
  /** A snapshot still inside its window. */
  fresh: boolean;
  /** A fetch in flight (single flight, P9). */
  pending: boolean;
}

/**
 * A full poll's first step. Every caller's own report reaches the upstream: a ping where the
 * answer comes from a snapshot (`fromFresh`, `join`), the full fetch where the caller leads.
 * - `fromFresh`: the snapshot of this window, after the ping was accepted.
 * - `join`: a refresh is under way: a delta poll the ledger vouches for is answered now (if the
 *   scope is shared, see `duringRefresh`), any other waits for the refresh; if the refresh fails,
 *   the caller leads one of its own.
 * - `lead`: this caller's full report is the scope's fetch.
 */
export type Start = 'fromFresh' | 'join' | 'lead';

export function planStart(view: ScopeView): Start {
  if (view.fresh) return 'fromFresh';
  return view.pending ? 'join' : 'lead';
}

/**
 * S1: where the refresh of a scope shared across replicas comes from: `readPublished` (another
 * replica's snapshot of this window), `fetchAndPublish` (this replica took the scope's lock), or
 * `followFetch` (another replica holds the lock: wait for its snapshot; if it gives up, fetch and
 * publish after all, unless the caller already has its answer). A scope not shared across
 * replicas (`PollPolicy.acrossReplicas` false) is fetched from the upstream, nothing published.
 */
export type ReplicaSource = 'readPublished' | 'fetchAndPublish' | 'followFetch';

export function planReplicaSource(replicas: { published: boolean; locked: boolean }): ReplicaSource {
  if (replicas.published) return 'readPublished';
  return replicas.locked ? 'fetchAndPublish' : 'followFetch';
}

/**
 * B7: how a refresh's leader is answered once its own report was accepted: it waits for the
 * whole refresh, or up to `waitMs` and then a delta poll the ledger vouches for is answered from
 * it (`duringRefresh`) and its next poll gets what the refresh brings; any other waits on.
 * Without sharing or a window a leader waits for its own fetch, as every caller does; one that
 * follows another replica's fetch under way sent a ping, which that fetch need not hold, so
 * waiting would bring it nothing of its own.
 */
export type LeaderPlan =
  | { wait: 'wholeRefresh' }
  /** `waitMs` undefined: not at all. */
  | { wait: 'then-ledger'; waitMs: number | undefined };

export function planLeader(policy: PollPolicy, followsFetch: boolean): LeaderPlan {
  if (!policy.shared || !policy.windowed) return { wait: 'wholeRefresh' };
  return { wait: 'then-ledger', waitMs: followsFetch ? undefined : policy.leaderWaitMs };
}

/** What a poll's request says about its client's id. */
export interface ClientId {
  /** `last_update_id`, if given. */
  lastUpdateId: number | undefined;
  /** The modern format was asked for. */
  modern: boolean;
}

/** A ledger state as the decisions see it, for a client at `lastUpdateId`; `behind` as in LedgerView. */
export function viewOf(state: LedgerState, lastUpdateId: number | undefined, behind = false): LedgerView {
  return { lastId: state.lastId, completeAt: state.completeAt, vouches: answersWithDelta(state, lastUpdateId), behind };
}

/** The ledger copy a decision looks at: its counter, its newest complete snapshot, and whether it vouches for the client's id (I2). */
export interface LedgerView {
  lastId: number;
  completeAt: number;
  vouches: boolean;
  /**
   * S3: this process took in an upstream answer the ledger lacks (the store was away): clients
   * may hold newer data than any copy of it has, from full answers made without it.
   */
  behind?: boolean | undefined;
}

/**
 * B7 during a refresh (joining it, or a leader past its wait): `answer` from the ledger now, or
 * `wait` for the refresh. Only a modern delta poll (a positive id, P3) on a shared scope, whose id
 * the newest ledger copy vouches for (I2) and which holds a complete snapshot (I5): its answer
 * holds every change after its id the ledger has, and what the refresh brings gets larger ids
 * (X1, P6). A full poll waits: only the refresh is the view "at that moment" (P7). S1: an id
 * above this process's copy (issued by another replica since) is looked up in the store first
 * (`readStore`), then decided on the copy read. S3: a ledger `behind` the upstream answers this
 * process took in (the store was away) answers nobody: a delta from it would say nothing changed
 * to a client whose full answer was made without it; the refresh is waited for.
 */
export type DuringRefresh = 'answer' | 'wait' | 'readStore';

export function planDuringRefresh(id: ClientId, held: LedgerView | undefined, storeRead: boolean): DuringRefresh {
  const { lastUpdateId } = id;
  if (lastUpdateId === undefined || lastUpdateId <= 0 || !id.modern || held?.behind) return 'wait';
  if (!storeRead && held && lastUpdateId > held.lastId) return 'readStore';
  if (!held || held.completeAt <= 0 || !held.vouches) return 'wait';
  return 'answer';
}

/**
 * X1: the ledger an answer is built from. `held`: the newest copy this process holds vouches for
 * the client's id, so a delta from it misses nothing the client saw. `readStore`: the answer is
 * full data, and the store is read first (the client may have seen newer data through another
 * replica); the newer of the two copies is answered from.
 */
export function planLedger(held: LedgerView | undefined): 'held' | 'readStore' {
  return held?.vouches ? 'held' : 'readStore';
}

/**
 * S3: what a modern answer is built from when the upstream answer it is for could not be
 * recorded (the store was away): that answer itself (`upstreamAnswer`: full data, the client's
 * own id, answers.ts), since every ledger copy lacks it and a delta from one would say nothing
 * changed; unless the copy this process holds merged a newer upstream answer (this one arrived
 * late, after a newer one was recorded): that copy is then the newest view there is (`ledger`).
 */
export function planStoreAway(answerAt: number, heldNewestAt: number | undefined): 'upstreamAnswer' | 'ledger' {
  return heldNewestAt !== undefined && heldNewestAt > answerAt ? 'ledger' : 'upstreamAnswer';
}

/** The kind of a modern answer (presence_answers_total). */
export type ModernKind = 'delta' | 'resync' | 'modern_full';

/**
 * X1, I6, P3: what a modern answer from a chosen ledger is. A delta where the ledger vouches for
 * the client's id; otherwise full data (`resync` when the client sent an id of its own), and for
 * an id above the ledger's counter the counter is raised past it first (`raiseTo`), so the full
 * answer carries the raise's mark and the next delta is exact. The delta is decided before the
 * raise: the client holds nothing the shim gave it.
 */
export interface AnswerPlan {
  kind: ModernKind;
  delta: boolean;
  raiseTo: number | undefined;
}

export function planAnswer(ledger: LedgerView, lastUpdateId: number | undefined): AnswerPlan {
  if (ledger.vouches) return { kind: 'delta', delta: true, raiseTo: undefined };
  const raiseTo = lastUpdateId !== undefined && lastUpdateId > ledger.lastId ? lastUpdateId : undefined;
  return { kind: lastUpdateId !== undefined && lastUpdateId > 0 ? 'resync' : 'modern_full', delta: false, raiseTo };
}

/**
 * A refresh's leader as the refresh sees it (B7). Its client may get its answer before the
 * refresh ends, or its report may be sent again in full (the replica it followed gave up, and
 * every waiter then fetches for itself), never both: a report sent for a client that already
 * has its answer would be one the shim made up (P9).
 */
export class Leader {
  private state: 'waiting' | 'answered' | 'reporting' = 'waiting';
  /** Its client gets its answer now, unless its report is being sent again. */
  answer(): boolean {
    if (this.state === 'reporting') return false;
    this.state = 'answered';
    return true;
  }
  /** Its report may be sent again, unless its client has its answer. */
  reportAgain(): boolean {
    if (this.state === 'answered') return false;
    this.state = 'reporting';
    return true;
  }
}
