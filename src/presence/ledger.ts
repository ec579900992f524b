/**
 * The presence ledger: the one place where `presence_last_update_id` values are made and kept.
 *
 * One ledger per realm. For each user it holds the newest observation of their presence, the id
 * at which it last changed, and whether the newest complete snapshot still showed them; for the
 * realm, the id counter and the epoch it started from. Pure: every function takes a state and
 * returns a new one or an answer; I/O and storage live elsewhere (store/).
 *
 * Invariants (contract P3–P7, checked by test/presence-ledger.property.test.ts):
 * - I1 ids are integers, strictly increasing per realm, never reused. A ledger starts at an
 *   epoch taken from the clock in microseconds (the process's, or Redis's shared one) and never
 *   below the highest id its process has seen: above every id a ledger created earlier could
 *   have issued (that would take more than one change per microsecond of its life), so ids stay
 *   unique across restarts, lost stores and replicas (P5).
 * - I2 the ledger vouches only for ids in (epoch, lastId]; any other id gets full data (P5).
 * - I3 per user, observations are ordered by the upstream's `server_timestamp`, never by
 *   arrival and never by the shim's clock: an older snapshot arriving late changes nothing (nor
 *   brings back a user a newer complete snapshot left out), and a newer one wins even when its
 *   timestamps are smaller (invisible mode, P6).
 * - I4 a user's `changedAt` moves whenever what a client holds for them would differ: new data,
 *   or coming back into view after a complete snapshot left them out (P6, P7).
 * - I5 answers cover only users of the snapshot they are built from (P7).
 */

/** Modern presence entry (P2): both timestamps, integers, idle_timestamp >= active_timestamp. */
export interface ModernPresence {
  active_timestamp: number;
  idle_timestamp: number;
}

export interface LedgerEntry {
  readonly active: number;
  readonly idle: number;
  /** server_timestamp of the snapshot that last changed this entry (data or visibility). */
  readonly seenAt: number;
  /** The id at which this user's data last changed, or they came back into view. */
  readonly changedAt: number;
  /** False once a newer complete snapshot left the user out. */
  readonly present: boolean;
}

export interface LedgerState {
  readonly epoch: number;
  readonly lastId: number;
  readonly users: ReadonlyMap<number, LedgerEntry>;
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
}

const MERGE_HISTORY = 32;

/** I1: a new ledger's epoch, from the clock (milliseconds, with a fraction when the clock has it). */
export function epochFor(nowMs: number): number {
  return Math.floor(nowMs * 1000);
}

/**
 * A new, empty ledger. `floor` is the highest id this process has seen issued (by any ledger):
 * the epoch is never below it, even when the clock stands still or steps back.
 */
export function createLedger(nowMs: number = Date.now(), floor = 0): LedgerState {
  const epoch = Math.max(epochFor(nowMs), floor);
  return { epoch, lastId: epoch, users: new Map(), merges: [], completeAt: 0 };
}

/** I2. */
export function vouchesFor(state: LedgerState, id: number): boolean {
  return Number.isSafeInteger(id) && id > state.epoch && id <= state.lastId;
}

const samePresence = (e: LedgerEntry, p: ModernPresence) => e.active === p.active_timestamp && e.idle === p.idle_timestamp;

/**
 * Merges an observation (I3, I4). Returns the same state object when nothing changed, so a
 * caller can skip writing it back.
 */
export function merge(state: LedgerState, obs: Observation): LedgerState {
  const ts = obs.serverTimestamp;
  let lastId = state.lastId;
  let users: Map<number, LedgerEntry> | undefined;
  const write = (id: number, e: LedgerEntry) => {
    users ??= new Map(state.users);
    users.set(id, e);
  };

  for (const [userId, p] of obs.presences) {
    const prev = state.users.get(userId);
    if (prev && ts <= prev.seenAt) continue; // I3: older or the same snapshot again
    if (!prev && ts < state.completeAt) continue; // I3: a newer complete snapshot left them out
    // Same data, still in view: nothing to write. A snapshot at least this new can only carry
    // this data or newer, so seenAt needs to move only when something changes.
    if (prev?.present && samePresence(prev, p)) continue;
    write(userId, { active: p.active_timestamp, idle: p.idle_timestamp, seenAt: ts, changedAt: ++lastId, present: true });
  }
  if (obs.complete) {
    for (const [userId, prev] of state.users) {
      if (prev.present && ts > prev.seenAt && !obs.presences.has(userId)) {
        write(userId, { ...prev, seenAt: ts, present: false });
      }
    }
  }
  const completeAt = obs.complete ? Math.max(state.completeAt, ts) : state.completeAt;
  const lastMerge = state.merges[state.merges.length - 1];
  if (!users && lastMerge && lastMerge[0] >= ts && completeAt === state.completeAt) return state;
  const merges = [...state.merges, [ts, lastId] as const].sort((a, b) => a[0] - b[0]).slice(-MERGE_HISTORY);
  return { epoch: state.epoch, lastId, users: users ?? state.users, merges, completeAt };
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

/** P3: a delta only for a positive id the ledger vouches for; anything else gets full data. */
export function answersWithDelta(state: LedgerState, lastUpdateId: number | undefined): boolean {
  return lastUpdateId !== undefined && lastUpdateId > 0 && vouchesFor(state, lastUpdateId);
}

export interface AnswerRequest {
  /** The users the snapshot being answered from shows (I5). */
  visible: Iterable<number>;
  /** The client's last_update_id, if it sent one. */
  lastUpdateId: number | undefined;
  /** P12: applies only to a full answer. */
  historyLimitDays?: number | undefined;
  /** server_timestamp of the snapshot, for P12's cut-off. */
  serverTimestamp: number;
}

export interface Answer {
  presences: Record<string, ModernPresence>;
  presenceLastUpdateId: number;
  /** False for a delta (P3). */
  full: boolean;
}

/** P3, P4, P12: what a client gets for a poll, from the ledger and one snapshot. */
export function answer(state: LedgerState, q: AnswerRequest): Answer {
  const x = q.lastUpdateId;
  const delta = answersWithDelta(state, x);
  const cutoff = !delta && q.historyLimitDays !== undefined ? q.serverTimestamp - q.historyLimitDays * 86_400 : undefined;
  const presences: Record<string, ModernPresence> = {};
  let maxId = -1;
  if (delta || q.historyLimitDays === undefined || q.historyLimitDays > 0) {
    for (const userId of q.visible) {
      const e = state.users.get(userId);
      if (!e?.present) continue;
      if (delta && e.changedAt <= x!) continue; // delta implies x is an id
      if (cutoff !== undefined && e.idle < cutoff) continue;
      presences[String(userId)] = { active_timestamp: e.active, idle_timestamp: e.idle };
      if (e.changedAt > maxId) maxId = e.changedAt;
    }
  }
  const presenceLastUpdateId = maxId >= 0 ? maxId : x !== undefined ? x : -1;
  return { presences, presenceLastUpdateId, full: !delta };
}
