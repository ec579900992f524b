/**
 * The presence ledger: the one place where `presence_last_update_id` values are made and kept,
 * and where the rules for the id an answer carries (P4, X1) and the history cut-off (P12) live.
 *
 * One ledger per realm. For each user it holds the newest observation of their presence, the id
 * at which it last changed, and whether the newest complete snapshot still showed them; for the
 * realm, the id counter and the epoch it started from. Pure: every function takes a state and
 * returns a new one or an answer; I/O and storage live elsewhere (store/). States are values
 * that share structure (B7): a merge writes only the users it changes into a new table
 * (ledger-table.ts) and leaves the old state as it was, so an answer built from a state while
 * the next merge runs sees one consistent state (its lastId, epoch and users together), and a
 * store that retries a merge on a newer copy loses nothing. Deltas walk a per-state index of
 * the changes by id, kept beside the state (derived, never stored).
 *
 * Invariants (contract P3–P7, X1, checked by test/presence-ledger.property.test.ts and the X1
 * model in test/presence-x1.property.test.ts):
 * - I1 ids are integers, strictly increasing per realm, never reused. A ledger starts at an
 *   epoch taken from the clock in microseconds (the process's, or Redis's shared one) and never
 *   below the highest id its process has seen: above every id a ledger created earlier could
 *   have issued (that would take more than one change per microsecond of its life), so ids stay
 *   unique across restarts, lost stores and replicas (P5). Hence no id ever issued is above the
 *   clock in microseconds: that bounds which ids are plausible (I6).
 * - I2 the ledger vouches only for ids in (epoch, lastId]; any other id gets full data (P5).
 * - I3 per user, observations are ordered by the upstream's `server_timestamp`, never by
 *   arrival and never by the shim's clock: an older snapshot arriving late changes nothing (nor
 *   brings back a user a newer complete snapshot left out), and a newer one wins even when its
 *   timestamps are smaller (invisible mode, P6). At one `server_timestamp`, by their data. An
 *   answer known only to the second (a `Date` header: a report's answer, a register before
 *   feature level 70, dated at the end of it) never outranks one of that second with a
 *   `server_timestamp`: that one counts as after it, and the dated one is merged with it by
 *   their data (`upstreamOrder`).
 * - I4 a user's `changedAt` moves whenever what a client holds for them would differ: new data,
 *   or coming back into view after a complete snapshot left them out (P6, P7).
 * - I5 answers cover only users in view (P7): of the snapshot a per-caller answer is built for,
 *   or, where every caller sees the same users, of the ledger itself (its `present` flags follow
 *   the newest complete snapshot). Their data is always the ledger's, the newest observation:
 *   a snapshot is an input to the ledger, never a second source of data or ids (X1).
 * - I6 an answer's id is never below the client's `last_update_id` (X1). A client id the ledger
 *   cannot vouch for gets full data; if it is plausible (0 < id <= the epoch clock now, I1) the
 *   counter is raised past it first (`raiseCounter`), and the answer carries the raise's mark
 *   (the id just above it), so the next delta is exact. The ids raised past were never issued:
 *   the ledger keeps them as a raised range and vouches for none of them, so whoever holds one
 *   (made up, or echoed while implausible with older data) gets full data and the mark, and no
 *   user is stamped anew: a raise costs its caller one full answer, never the realm a delta of
 *   every user. Raises are bounded per realm (RAISES_PER_MINUTE); past that, and for an
 *   implausible id (above the clock), the id is echoed with full data and stays unvouched, so
 *   that client keeps getting full data (never a partial map, P3) until a later poll may raise
 *   the counter; a client that re-registers or sends -1 gets an id of the ledger's own.
 * - I7 every change to a ledger is a `LedgerChange` applied by one writer at a time (the store),
 *   so every replica sees one history of ids (S1).
 * - I8 a user's `active` never moves back by a client's later report (P14): servers before 7.0
 *   keep one row per client, so an `idle` report after an `active` one makes the user look
 *   active long ago; a modern server keeps the last active time. An observation whose
 *   `idle_timestamp` is not older than the entry's keeps the entry's `active` where it is
 *   larger. The upstream backdating a user on purpose is taken as it is (P6): an observation
 *   that moves the whole user back (its `idle_timestamp` older too), or, where the upstream has
 *   invisible mode (3.0+), one that hides them: their active time back and their last report
 *   at least HIDDEN_REPORT_AGE_SECONDS before the observation, as the one backdated idle row
 *   invisible mode writes shows, whatever its time against the report the ledger holds. A
 *   caller's own report (P15) only ever raises a user's timestamps.
 * - I9 an observation older than the newest merged by more than an answer can be late is the
 *   upstream's clock stepping back (X14): the realm starts a new epoch above every id it issued.
 */

import { type LedgerEntry, LedgerTable, type LedgerTableEdit } from './ledger-table.js';

export type { LedgerEntry } from './ledger-table.js';

/** Modern presence entry (P2): both timestamps, integers, idle_timestamp >= active_timestamp. */
export interface ModernPresence {
  active_timestamp: number;
  idle_timestamp: number;
}

/**
 * I6: ids the counter was raised past, `(after, upTo]`, never issued, and when (the epoch
 * clock, ms). `upTo + 1` is the raise's mark, the id its caller continues from.
 */
export type RaisedRange = readonly [after: number, upTo: number, atMs: number];

export interface LedgerState {
  readonly epoch: number;
  readonly lastId: number;
  readonly users: ReadonlyMap<number, LedgerEntry>;
  /** I6: the ranges the counter was raised past, oldest first, at most RAISES_KEPT. */
  readonly raised: ReadonlyArray<RaisedRange>;
  /**
   * (server_timestamp, lastId after merging it) of recent merges, newest last, bounded: tells
   * which id a client holding an upstream answer of a given time is safe to continue from.
   */
  readonly merges: ReadonlyArray<readonly [number, number]>;
  /**
   * server_timestamp of the newest complete snapshot merged (0: none). A user it did not show
   * is out of view as of then, including one the ledger has never seen (I3, I4).
   */
  readonly completeAt: number;
}

/** One upstream snapshot, converted to the modern format and keyed by user id. */
export interface Observation {
  /** The upstream's server_timestamp for the snapshot (float seconds). */
  serverTimestamp: number;
  presences: ReadonlyMap<number, ModernPresence>;
  /**
   * True when the snapshot is everything the realm shows (a shared realm snapshot): users it
   * leaves out are then out of view. A per-caller snapshot says nothing about other users.
   */
  complete: boolean;
  /**
   * P15: the caller's own report as the upstream accepted it (a user active as of then), not
   * a snapshot: it raises the user's timestamps and never lowers them (I8), and says nothing
   * about anyone else.
   */
  report?: boolean | undefined;
  /**
   * I8: the upstream has invisible mode (`presence_enabled`, feature level 3: every era but
   * 2.1's), so an observation that shows a user hidden is its doing, taken as it is.
   */
  invisibleMode?: boolean | undefined;
  /**
   * Timed by a `Date` header (a report's answer, a register before feature level 70), a clock
   * that may be another machine's (a front proxy's): it orders the data it carries, but is not
   * one of the realm's merges, which idAsOf and the clock-step rule (X14) read. Reports are.
   */
  dateTimed?: boolean | undefined;
  /**
   * X14: how much older than the newest one merged an observation can arrive and still be a
   * late answer (a slow fetch ends within the upstream deadline, X3). One older than that means
   * the upstream's clock stepped back. Default: CLOCK_STEP_SECONDS.
   */
  maxLateSeconds?: number | undefined;
}

const MERGE_HISTORY = 32;

/**
 * P6: a `Date` header says the second an answer was made in, not when in it: such an answer is
 * dated at the end of that second (`timeOfDateHeader`), which also marks its time as known only
 * to the second (`isDateTimed`).
 */
const END_OF_SECOND = 0.999;

/** P6: the upstream time of an answer dated by its `Date` header (milliseconds, a whole second). */
export function timeOfDateHeader(dateMs: number): number {
  return dateMs / 1000 + END_OF_SECOND;
}

/** P6: is this upstream time a `Date` header's (`timeOfDateHeader`), known only to the second? */
function isDateTimed(ts: number): boolean {
  return Math.abs(ts - Math.floor(ts) - END_OF_SECOND) < 1e-6;
}

/**
 * I3, P6: how an observation at upstream time `ts` orders against what the ledger holds from one
 * at `seenAt`: `after` it, `before` it, or a `tie`, merged by their data (each timestamp the
 * later, I8): the same time, or an answer dated by its `Date` header in the second of one with a
 * `server_timestamp`. Which of those two came first in that second cannot be told; the dated
 * one never outranks the other, which counts as after it.
 */
export function upstreamOrder(ts: number, seenAt: number): 'after' | 'before' | 'tie' {
  if (ts === seenAt) return 'tie';
  if (Math.floor(ts) === Math.floor(seenAt) && isDateTimed(ts) !== isDateTimed(seenAt)) return isDateTimed(ts) ? 'tie' : 'after';
  return ts > seenAt ? 'after' : 'before';
}

/** X14: the default of `Observation.maxLateSeconds` (the default upstream deadline, 120 s, and a minute). */
export const CLOCK_STEP_SECONDS = 180;

/** I1: a new ledger's epoch, from the clock (milliseconds, with a fraction when the clock has it). */
function epochFor(nowMs: number): number {
  return Math.floor(nowMs * 1000);
}

/**
 * A new, empty ledger. `floor` is the highest id this process has seen issued (by any ledger):
 * the epoch is never below it, even when the clock stands still or steps back.
 */
export function createLedger(nowMs: number = Date.now(), floor = 0): LedgerState {
  const epoch = Math.max(epochFor(nowMs), floor);
  const state: LedgerState = { epoch, lastId: epoch, users: LedgerTable.empty(), raised: [], merges: [], completeAt: 0 };
  // Indexed from the start, so every merge after extends it (B7: never a sort of the realm).
  indexes.set(state, { ids: [], users: [], length: 0 });
  return state;
}

/**
 * X13: the smallest id a ledger makes: ids come from a microsecond clock (I1), so every one
 * issued since 2001 is above 10^15. A server's own `presence_last_update_id` counts its presence
 * rows and is never near it.
 */
const FIRST_LEDGER_ID = 10 ** 15;

/** X13: is this an id a ledger made (not the upstream's own)? */
export function isLedgerId(id: number): boolean {
  return Number.isSafeInteger(id) && id >= FIRST_LEDGER_ID;
}

/** I6: could an id have been issued by now? Ids come from a microsecond clock (I1). */
function isPlausibleId(id: number, nowMs: number): boolean {
  return Number.isSafeInteger(id) && id > 0 && id <= epochFor(nowMs);
}

/** I6: raises a realm's counter takes in a minute of the epoch clock, at most. */
export const RAISES_PER_MINUTE = 6;

/**
 * I6: raised ranges a ledger keeps. Past it the two oldest become one: the ids issued between
 * them (over ten minutes old at RAISES_PER_MINUTE) are then vouched for no more, and a client
 * still holding one gets full data once, never a delta that could miss something.
 */
const RAISES_KEPT = 64;

const MINUTE_MS = 60_000;

/**
 * I6: raises the counter past `atLeast` when that id is plausible at `nowMs` (the clock epochs
 * come from), above the counter, and the realm has raises left this minute; otherwise the same
 * state. The ids in between were never issued: kept as a raised range the ledger vouches for
 * none of (whoever holds one, made up or echoed while implausible with older data, gets full
 * data), and `atLeast + 1`, the mark, is the id the caller's full answer carries (`answerEntries`).
 * No user is stamped anew, so every id the ledger issued still gets its exact delta.
 */
export function raiseCounter(state: LedgerState, atLeast: number, nowMs: number): LedgerState {
  if (atLeast <= state.lastId || !isPlausibleId(atLeast + 1, nowMs)) return state;
  const recent = state.raised.filter(([, , atMs]) => atMs > nowMs - MINUTE_MS).length;
  if (recent >= RAISES_PER_MINUTE) return state;
  let raised = [...state.raised, [state.lastId, atLeast, nowMs] as const];
  if (raised.length > RAISES_KEPT) raised = [[raised[0]![0], raised[1]![1], raised[1]![2]], ...raised.slice(2)];
  const next: LedgerState = { ...state, lastId: atLeast + 1, raised };
  extendIndex(state, next, []);
  return next;
}

/** I6: the raised range holding `id`, if any. */
function raisedRangeOf(state: LedgerState, id: number): RaisedRange | undefined {
  return state.raised.find(([after, upTo]) => id > after && id <= upTo);
}

/** A merge computed ahead (`prepareMerge`): `next` is `merge(base, observation)`. */
export interface PreparedMerge {
  base: LedgerState;
  next: LedgerState;
  /**
   * The users `next` wrote, in the order it wrote them: those with a new `changedAt` in the
   * order of it, then those only moved out of view (`rebasedMerge` moves their ids).
   */
  written: readonly number[];
}

/** I7: what a store applies to a realm's ledger, atomically. */
export type LedgerChange =
  | { kind: 'observation'; observation: Observation; prepared?: PreparedMerge | undefined }
  /** Raise the counter to at least this id (I6); `0` only makes sure the ledger exists. */
  | { kind: 'counter'; atLeast: number };

/** Applies one change; the same state object when nothing changed. `nowMs`: the epoch clock. */
export function applyChange(state: LedgerState, change: LedgerChange, nowMs: number): LedgerState {
  if (change.kind === 'counter') return raiseCounter(state, change.atLeast, nowMs);
  const { observation, prepared } = change;
  if (!prepared) return merge(state, observation);
  // A merge prepared on this very state is this merge's result (states are values); on a state
  // made from it by a few changes in between (B7: every poll's own report, P15), rebased over
  // them; otherwise made again here.
  if (prepared.base === state) return prepared.next;
  return rebasedMerge(state, observation, prepared) ?? merge(state, observation);
}

/** I2, I6: ids the ledger issued; never one it was raised past. */
export function vouchesFor(state: LedgerState, id: number): boolean {
  return Number.isSafeInteger(id) && id > state.epoch && id <= state.lastId && raisedRangeOf(state, id) === undefined;
}

const samePresence = (e: LedgerEntry, p: ModernPresence) => e.active === p.active_timestamp && e.idle === p.idle_timestamp;

/**
 * I8: how long before an upstream answer's own time the user's last report is when the upstream
 * hides them. Invisible mode replaces a user's rows with one idle row OFFLINE_THRESHOLD_SECS +
 * 120 back: 420 s before 7.0 (threshold 300), 320 s from it (200). The realm's own polls see an
 * ordinary idle report within a minute or so, long before it is this old.
 */
export const HIDDEN_REPORT_AGE_SECONDS = 320;

/** I8: does a newer observation show the upstream hiding the user (their active time back, their last report that old)? */
export function hidesUser(prev: LedgerEntry, seen: ModernPresence, serverTimestamp: number): boolean {
  return seen.active_timestamp < prev.active && serverTimestamp - seen.idle_timestamp >= HIDDEN_REPORT_AGE_SECONDS;
}

/**
 * I8 (P14, P15): what a newer observation of a user leaves in the ledger. The upstream moving
 * the whole user back (`idle_timestamp` older too) or hiding them (`hides`: invisible mode) is
 * taken as it is; otherwise the active time seen last stays where it is larger (P2: idle never
 * below it).
 * `raiseOnly`: a report, or an observation at the entry's own server_timestamp, which the
 * upstream's clock cannot order (a register before 5.0 is timed by its `Date` header, to the
 * second): a user's timestamps only move forward but for invisible mode's backdating, which
 * one second cannot show, so each timestamp takes the later of the two, in any order.
 */
export function keptActive(prev: LedgerEntry, seen: ModernPresence, raiseOnly: boolean, hides = false): ModernPresence {
  if (!raiseOnly && (hides || seen.idle_timestamp < prev.idle)) return seen;
  const active = Math.max(prev.active, seen.active_timestamp);
  const idle = Math.max(seen.idle_timestamp, active, raiseOnly ? prev.idle : 0);
  return active === seen.active_timestamp && idle === seen.idle_timestamp ? seen : { active_timestamp: active, idle_timestamp: idle };
}

/**
 * Merges an observation (I3, I4, I8). Returns the same state object when nothing changed, so a
 * caller can skip writing it back. The new state shares every user it did not change with the
 * old one (B7: ledger-table.ts), and the old one stays as it was: states are values.
 */
export function merge(state: LedgerState, obs: Observation): LedgerState {
  const steps = mergeSteps(state, obs);
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/**
 * Users looked at between two chances `prepareMerge` gives its caller to pause (about 4 ms of
 * CPU at 100k users; the caller decides whether to let the event loop run then).
 */
const MERGE_STEP = 1_000;

/**
 * B7: `merge`, with `pause` called every MERGE_STEP users and awaited when it returns a promise
 * (a 100k-user merge is then no single block). Its `next` is `merge(base, obs)` exactly; a store
 * takes it as it is when the realm's ledger is still `base`, and rebased when a few changes came
 * in between (I7, `applyChange`, `rebasedMerge`).
 */
export async function prepareMerge(base: LedgerState, obs: Observation, pause: () => Promise<unknown> | undefined): Promise<PreparedMerge> {
  const written: number[] = [];
  const steps = mergeSteps(base, obs, written);
  for (;;) {
    const r = steps.next();
    if (r.done) return { base, next: r.value, written };
    const paused = pause();
    if (paused) await paused;
  }
}

/**
 * X14: the ledger an observation is merged into. Normally `state`; but an observation older than
 * the newest merged by more than any answer can arrive late means the upstream's clock stepped
 * back (an NTP correction): ordered by that clock, every new observation would be discarded as
 * older until it passed its old maximum. The realm then starts a new epoch above every id it
 * issued, as after a failover: every client's id gets full data (I2), which the new epoch builds
 * from observations on the upstream's new time.
 */
function clockChecked(state: LedgerState, obs: Observation): LedgerState {
  const newest = state.merges[state.merges.length - 1]?.[0];
  if (obs.report || obs.dateTimed || newest === undefined || obs.serverTimestamp >= newest - (obs.maxLateSeconds ?? CLOCK_STEP_SECONDS))
    return state;
  const epoch = state.lastId + 1;
  const fresh: LedgerState = { epoch, lastId: epoch, users: LedgerTable.empty(), raised: [], merges: [], completeAt: 0 };
  indexes.set(fresh, { ids: [], users: [], length: 0 });
  return fresh;
}

/**
 * I3, I8: what a user's entry takes from an observation, and its time, or undefined when the
 * observation is before what the ledger holds of them (or, for a user it does not hold, before a
 * complete snapshot that left them out). A tie (`upstreamOrder`) keeps the time held: the later
 * data, each timestamp on its own.
 */
function observed(
  state: LedgerState,
  prev: LedgerEntry | undefined,
  seen: ModernPresence,
  obs: Observation,
): { p: ModernPresence; seenAt: number } | undefined {
  const ts = obs.serverTimestamp;
  if (!prev) return upstreamOrder(state.completeAt, ts) === 'after' ? undefined : { p: seen, seenAt: ts };
  const order = upstreamOrder(ts, prev.seenAt);
  if (order === 'before') return undefined;
  const hides = obs.invisibleMode === true && hidesUser(prev, seen, ts);
  const p = keptActive(prev, seen, obs.report === true || order === 'tie', hides);
  return { p, seenAt: order === 'after' ? ts : prev.seenAt };
}

/**
 * I3, I4: the entry of a user an observation shows, changed at `changedAt`; undefined when there
 * is nothing to write: older, or the same data still in view. A snapshot at least this new can
 * only carry this data or newer, so seenAt needs to move only when something changes.
 */
function entrySeen(
  state: LedgerState,
  prev: LedgerEntry | undefined,
  seen: ModernPresence,
  obs: Observation,
  changedAt: number,
): LedgerEntry | undefined {
  const taken = observed(state, prev, seen, obs);
  if (!taken || (prev?.present && samePresence(prev, taken.p))) return undefined;
  return { active: taken.p.active_timestamp, idle: taken.p.idle_timestamp, seenAt: taken.seenAt, changedAt, present: true };
}

/**
 * I4, P7: the entry of a user a complete observation leaves out: out of view as of it when it is
 * newer than what the ledger holds of them (a tie says nothing, `upstreamOrder`); undefined
 * otherwise. Their id stays: a client keeps what it holds of a user out of view.
 */
function entryLeftOut(prev: LedgerEntry, obs: Observation): LedgerEntry | undefined {
  if (!prev.present || upstreamOrder(obs.serverTimestamp, prev.seenAt) !== 'after') return undefined;
  return { ...prev, seenAt: obs.serverTimestamp, present: false };
}

/**
 * The state a merge of `obs` into `state` makes, given its writes (`users`, undefined: none) and
 * the counter after them; `changed`: the users with a new changedAt, in its order. `state`
 * itself when nothing changed, so a caller can skip writing it back.
 */
function merged(state: LedgerState, obs: Observation, lastId: number, users: LedgerTable | undefined, changed: number[]): LedgerState {
  const ts = obs.serverTimestamp;
  const completeAt = obs.complete ? Math.max(state.completeAt, ts) : state.completeAt;
  const lastMerge = state.merges[state.merges.length - 1];
  const dateTimed = obs.dateTimed === true || obs.report === true;
  if (!users && (dateTimed || (lastMerge && lastMerge[0] >= ts)) && completeAt === state.completeAt) return state;
  const merges = dateTimed ? state.merges : [...state.merges, [ts, lastId] as const].sort((a, b) => a[0] - b[0]).slice(-MERGE_HISTORY);
  const next: LedgerState = { ...state, lastId, users: users ?? state.users, merges, completeAt };
  extendIndex(state, next, changed);
  return next;
}

/** `written`: every user the merge writes is added to it, in the order written (`PreparedMerge`). */
function* mergeSteps(current: LedgerState, obs: Observation, written: number[] = []): Generator<void, LedgerState> {
  const state = clockChecked(current, obs);
  let looked = 0;
  let lastId = state.lastId;
  let users: LedgerTableEdit | undefined;
  /** Users whose changedAt moved, in id order (the delta index's new tail). */
  const changed: number[] = [];
  const write = (id: number, e: LedgerEntry) => {
    users ??= LedgerTable.from(state.users).edit();
    users.set(id, e);
    written.push(id);
  };

  for (const [userId, seen] of obs.presences) {
    if (++looked % MERGE_STEP === 0) yield;
    const e = entrySeen(state, state.users.get(userId), seen, obs, lastId + 1);
    if (!e) continue;
    write(userId, e);
    lastId = e.changedAt;
    changed.push(userId);
  }
  if (obs.complete) {
    for (const [userId, prev] of state.users) {
      if (++looked % MERGE_STEP === 0) yield;
      const e = obs.presences.has(userId) ? undefined : entryLeftOut(prev, obs);
      if (e) write(userId, e);
    }
  }
  return merged(state, obs, lastId, users?.done(), changed);
}

/**
 * B7: the users whose entries differ between `state` and `base` (a state made from it by
 * changes), or undefined past `limit` of them. Tables that share their untouched parts (a
 * state made from `base` here, or from change records, S1) are compared in what was copied.
 */
function usersChangedSince(state: LedgerState, base: LedgerState, limit: number): Set<number> | undefined {
  if (!(state.users instanceof LedgerTable) || !(base.users instanceof LedgerTable)) return undefined;
  const users = new Set<number>();
  for (const [id] of state.users.differences(base.users)) {
    users.add(id);
    if (users.size > limit) return undefined;
  }
  return users;
}

/**
 * B7: users changed in between past which a prepared merge is merged again rather than rebased
 * (a copy read whole differs in every user): a rebase then costs no more than 10,000 users of
 * merging, about 40 ms at 100k users.
 */
const REBASE_LIMIT = 10_000;

/**
 * B7, I7: `prepared` (a merge of `obs` made on its base) as the merge of `obs` into `state`, a
 * state made from that base by a few changes in between (every poll's own report, P15), in time
 * of the users the merge wrote and those changes, never of the realm. What every client sees is
 * `merge(state, obs)`'s: the same entries, the same counter and merge history, the same users
 * with a new id. The merge's new ids are moved above `state`'s counter, in the order it made
 * them, so no id a client may hold is issued again or stands for less than it did (I1, X1); a
 * user the changes in between touched is merged again on what `state` holds of them (I3, I8),
 * taking the next id where it changes. Undefined where the prepared merge cannot stand for the
 * merge on `state`: another epoch, or a new one the merge started (X14, I9); another complete
 * snapshot merged since (who is out of view moved); more than REBASE_LIMIT users differing from
 * the base (a large realm's copy read whole differs in every user): the caller merges again.
 */
export function rebasedMerge(state: LedgerState, obs: Observation, prepared: PreparedMerge): LedgerState | undefined {
  const { base, next, written } = prepared;
  if (state.epoch !== base.epoch || next.epoch !== base.epoch || state.lastId < base.lastId) return undefined;
  if (state.completeAt !== base.completeAt || clockChecked(state, obs) !== state) return undefined;
  const touched = usersChangedSince(state, base, REBASE_LIMIT);
  if (!touched) return undefined;
  const edit = LedgerTable.from(state.users).edit();
  let wrote = false;
  let lastId = state.lastId;
  const changed: number[] = [];
  const write = (id: number, e: LedgerEntry) => {
    edit.set(id, e);
    wrote = true;
    if (e.changedAt > state.lastId) changed.push(id);
  };
  for (const userId of written) {
    if (touched.has(userId)) continue;
    const e = next.users.get(userId)!;
    // Only moved out of view: the id it had (entryLeftOut).
    write(userId, e.changedAt > base.lastId ? { ...e, changedAt: ++lastId } : e);
  }
  for (const userId of touched) {
    const prev = state.users.get(userId);
    const seen = obs.presences.get(userId);
    const e = seen ? entrySeen(state, prev, seen, obs, lastId + 1) : prev && obs.complete ? entryLeftOut(prev, obs) : undefined;
    if (!e) continue;
    write(userId, e);
    lastId = Math.max(lastId, e.changedAt);
  }
  return merged(state, obs, lastId, wrote ? edit.done() : undefined, changed);
}

/**
 * S1: what changed from `base` to `next` (a state made from it by changes, I7): `next` with
 * only the users whose entries differ. A replica that holds `base` gets `next` back from it
 * with `withChanges`, without reading the whole realm.
 */
export function changesFrom(base: LedgerState, next: LedgerState): LedgerState {
  const users = new Map<number, LedgerEntry>();
  // A ledger never drops a user: every difference is a user `next` holds.
  for (const [id, e] of LedgerTable.from(next.users).differences(LedgerTable.from(base.users))) if (e) users.set(id, e);
  return { ...next, users };
}

/**
 * S1: the state `changes` (from `changesFrom(base, next)`) describes, made from this replica's
 * copy of `base`: `next` exactly, sharing every user it did not change with `base`, and its
 * delta index extended from `base`'s instead of sorted anew (B7). Ids are taken as they were
 * made by the writer (I7), never made here. Undefined when `changes` cannot be of `base`'s
 * history (another epoch, a counter behind it): the caller reads the whole ledger instead.
 */
export function withChanges(base: LedgerState, changes: LedgerState): LedgerState | undefined {
  if (changes.epoch !== base.epoch || changes.lastId < base.lastId) return undefined;
  const edit = LedgerTable.from(base.users).edit();
  /** Users with a new changedAt, in the order of it (the index's new tail). */
  const moved: Array<[number, number]> = [];
  for (const [id, e] of changes.users) {
    if (base.users.get(id)?.changedAt !== e.changedAt) moved.push([e.changedAt, id]);
    edit.set(id, e);
  }
  moved.sort((a, b) => a[0] - b[0]);
  const next: LedgerState = { ...changes, users: edit.done() };
  extendIndex(
    base,
    next,
    moved.map(([, id]) => id),
  );
  return next;
}

/**
 * B7, P3: the delta index of a state, users in the order of their `changedAt`, so a delta
 * touches only the changes after the client's id, never every user. Derived from the state
 * (kept beside it, not in it: a stored or decoded state has none until a delta asks), and
 * shared between states: a merge appends to its parent's arrays where nobody else did.
 * An entry whose user changed again later is stale and skipped (their newer one follows).
 */
interface ChangeIndex {
  /** changedAt, ascending; only the first `length` entries belong to this state. */
  readonly ids: number[];
  readonly users: number[];
  readonly length: number;
}

const indexes = new WeakMap<LedgerState, ChangeIndex>();

function indexOf(state: LedgerState): ChangeIndex {
  let index = indexes.get(state);
  if (!index) {
    const users = [...state.users.keys()];
    const changedAt = users.map((u) => state.users.get(u)!.changedAt);
    const order = Array.from(users.keys()).sort((a, b) => changedAt[a]! - changedAt[b]!);
    index = { ids: order.map((i) => changedAt[i]!), users: order.map((i) => users[i]!), length: order.length };
    indexes.set(state, index);
  }
  return index;
}

function extendIndex(parent: LedgerState, next: LedgerState, changed: number[]): void {
  const p = indexes.get(parent);
  if (!p) return; // a state read from a store: indexed when a delta first asks for it
  let { ids, users } = p;
  if (ids.length !== p.length) {
    // Another state was made from the same parent (a store's retry): this one gets its own copy.
    ids = ids.slice(0, p.length);
    users = users.slice(0, p.length);
  }
  for (const userId of changed) {
    ids.push(next.users.get(userId)!.changedAt);
    users.push(userId);
  }
  let index: ChangeIndex = { ids, users, length: ids.length };
  // Stale entries outnumber live ones: dropped, once in a while (linear, no sort).
  if (index.length > 2 * next.users.size + 1024) {
    const live = (i: number) => next.users.get(users[i]!)?.changedAt === ids[i];
    const keep = Array.from({ length: index.length }, (_, i) => i).filter(live);
    index = { ids: keep.map((i) => ids[i]!), users: keep.map((i) => users[i]!), length: keep.length };
  }
  indexes.set(next, index);
}

/** The users that changed after `afterId` in this state (I4), each once, by the delta index. */
function* changedSince(state: LedgerState, afterId: number): Generator<number> {
  const { ids, users, length } = indexOf(state);
  let lo = 0;
  let hi = length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ids[mid]! <= afterId) lo = mid + 1;
    else hi = mid;
  }
  for (let i = lo; i < length; i++) {
    const userId = users[i]!;
    if (state.users.get(userId)?.changedAt === ids[i]) yield userId;
  }
}

/**
 * The id a client may continue from after receiving an upstream answer taken at
 * `serverTimestamp` that the ledger did not merge itself (a legacy answer on 7.0–8.x): the
 * ledger's id after the newest merge not newer than that answer. Every change with a smaller
 * id was already in the upstream's data at that time. -1 when the ledger cannot tell.
 */
export function idAsOf(state: LedgerState, serverTimestamp: number): number {
  for (let i = state.merges.length - 1; i >= 0; i--) {
    const [ts, id] = state.merges[i]!;
    if (ts <= serverTimestamp) return id > state.epoch ? id : -1;
  }
  return -1;
}

/** S3: the server_timestamp of the newest upstream answer merged (0: none yet). */
export function newestAnswerAt(state: LedgerState): number {
  return Math.max(state.completeAt, state.merges[state.merges.length - 1]?.[0] ?? 0);
}

/** P3: a delta only for a positive id the ledger vouches for; anything else gets full data. */
export function answersWithDelta(state: LedgerState, lastUpdateId: number | undefined): boolean {
  return lastUpdateId !== undefined && lastUpdateId > 0 && vouchesFor(state, lastUpdateId);
}

/** P12: a full answer leaves out users idle for longer than this before its server_timestamp. */
const SECONDS_PER_DAY = 86_400;

/**
 * P12: the oldest `idle_timestamp` a full answer keeps (Infinity for 0 days: no users);
 * undefined: no limit. Never wider than the upstream's own window, which decides who is shown.
 * Only for a client without a positive `last_update_id`: a modern server ignores the limit
 * otherwise, also when the shim answers such an id with full data (P3, P5).
 */
export function historyCutoff(
  historyLimitDays: number | undefined,
  serverTimestamp: number,
  lastUpdateId?: number | undefined,
): number | undefined {
  if (historyLimitDays === undefined || (lastUpdateId !== undefined && lastUpdateId > 0)) return undefined;
  return historyLimitDays <= 0 ? Infinity : serverTimestamp - historyLimitDays * SECONDS_PER_DAY;
}

/** P12: whether a user idle since `idle` is kept under `cutoff` (from `historyCutoff`). */
export function withinHistory(idle: number, cutoff: number | undefined): boolean {
  return cutoff === undefined || idle >= cutoff;
}

/** P4, I6: the id an answer carries, from the largest id among the users it returns. */
export function answerId(largestReturned: number, lastUpdateId: number | undefined): number {
  // P4: the largest id returned; else the client's own id echoed; else -1.
  const id = largestReturned >= 0 ? largestReturned : (lastUpdateId ?? -1);
  // I6: never below the client's id (the counter was raised to it when that was plausible).
  return lastUpdateId !== undefined && lastUpdateId > id ? lastUpdateId : id;
}

/**
 * P4, P5, I6 for an answer made without a ledger (the store is away, S3): it holds full data and no
 * user's id is known, so it carries the client's own positive id echoed (never below it), else -1.
 */
export function answerIdWithoutLedger(lastUpdateId: number | undefined): number {
  return lastUpdateId !== undefined && lastUpdateId > 0 ? lastUpdateId : -1;
}

export interface AnswerRequest {
  /** The users in view (I5): a per-caller snapshot's; undefined: the ledger's own `present` users. */
  visible?: Iterable<number> | undefined;
  /** The client's last_update_id, if it sent one. */
  lastUpdateId: number | undefined;
  /**
   * Whether to answer with a delta, decided with `answersWithDelta` on the ledger before any
   * counter raise (a raised counter vouches for the id it was raised to, but the client holds
   * nothing the shim gave it). Default: `answersWithDelta` on this state.
   */
  delta?: boolean | undefined;
  /** P12: applies only to a full answer. */
  historyLimitDays?: number | undefined;
  /** server_timestamp of the answer, for P12's cut-off. */
  serverTimestamp: number;
}

export interface Answer {
  presences: Record<string, ModernPresence>;
  presenceLastUpdateId: number;
  /** False for a delta (P3). */
  full: boolean;
}

function* presentUsers(state: LedgerState): Generator<number> {
  if (state.users instanceof LedgerTable) yield* state.users.presentIds();
  else for (const [userId, e] of state.users) if (e.present) yield userId;
}

/** What an answer holds (`answerEntries`). */
export interface AnswerEntries {
  delta: boolean;
  entries: Iterable<[number, LedgerEntry]>;
  /**
   * I6: the least id the answer carries (-1: no such floor): for full data to an id the counter
   * was raised past, that raise's mark. The answer holds the ledger's data as of its counter,
   * which is at least the mark, so a delta from it misses nothing.
   */
  leastId: number;
}

/**
 * P3, P12, I5: the users an answer holds and their entries, one at a time (B7: a caller can
 * build a 100k-user answer in steps), with whether it is a delta. Pure, like `answer`.
 */
export function answerEntries(state: LedgerState, q: AnswerRequest): AnswerEntries {
  const lastUpdateId = q.lastUpdateId;
  const delta = (q.delta ?? answersWithDelta(state, lastUpdateId)) && lastUpdateId !== undefined && vouchesFor(state, lastUpdateId);
  const cutoff = historyCutoff(q.historyLimitDays, q.serverTimestamp, lastUpdateId);
  function* entries(): Generator<[number, LedgerEntry]> {
    if (cutoff === Infinity) return;
    // A delta for the users every caller sees walks the changes only (the delta index).
    const candidates = q.visible ?? (delta ? changedSince(state, lastUpdateId!) : presentUsers(state));
    for (const userId of candidates) {
      const e = state.users.get(userId);
      if (!e?.present) continue;
      if (delta && e.changedAt <= lastUpdateId!) continue;
      if (!withinHistory(e.idle, cutoff)) continue;
      yield [userId, e];
    }
  }
  const range = delta || lastUpdateId === undefined ? undefined : raisedRangeOf(state, lastUpdateId);
  return { delta, entries: entries(), leastId: range ? range[1] + 1 : -1 };
}

/** P3, P4, P12, I5, I6: what a client gets for a poll. */
export function answer(state: LedgerState, q: AnswerRequest): Answer {
  const { delta, entries, leastId } = answerEntries(state, q);
  const presences: Record<string, ModernPresence> = {};
  let largest = -1;
  for (const [userId, e] of entries) {
    presences[String(userId)] = { active_timestamp: e.active, idle_timestamp: e.idle };
    if (e.changedAt > largest) largest = e.changedAt;
  }
  return { presences, presenceLastUpdateId: answerId(Math.max(largest, leastId), q.lastUpdateId), full: !delta };
}

export interface LegacyIdRequest {
  /** True when the answer's presences were merged into this ledger (2.1–6.x); false on 7.0–8.x (lossy). */
  merged: boolean;
  /** The users the answer shows, when merged (I5); undefined: the ledger's own view. */
  visible?: Iterable<number> | undefined;
  serverTimestamp: number;
  historyLimitDays?: number | undefined;
  /** True when the answer shows no user at all (P4: only then -1). */
  empty: boolean;
}

/**
 * P4 for an answer that passes the upstream's legacy presences on (a poll or a register without
 * slim_presence). Merged: the largest id among the users shown. Not merged: the id every change
 * before this answer is covered by; where the ledger has seen nothing as old as the answer, its
 * epoch, which it vouches for nothing with (I2): a client continuing from it gets full data,
 * never a partial map. -1 only when the answer shows nobody.
 */
export function legacyAnswerId(state: LedgerState, q: LegacyIdRequest): number {
  if (q.empty) return -1;
  if (q.merged) {
    const { entries } = answerEntries(state, {
      visible: q.visible,
      lastUpdateId: undefined,
      historyLimitDays: q.historyLimitDays,
      serverTimestamp: q.serverTimestamp,
    });
    // The largest id among the users shown, without building their answer (B7).
    let largest = -1;
    for (const [, e] of entries) if (e.changedAt > largest) largest = e.changedAt;
    if (largest >= 0) return largest;
  }
  const asOf = idAsOf(state, q.serverTimestamp);
  return asOf >= 0 ? asOf : state.epoch;
}
