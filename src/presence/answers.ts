import type { Encodable } from '../http/compress.js';
import { setImmediate as yieldTurn } from 'node:timers/promises';
import {
  answer,
  answerEntries,
  answerId,
  answerIdWithoutLedger,
  historyCutoff,
  keptActive,
  legacyAnswerId,
  newestAnswerAt,
  type AnswerRequest,
  type LedgerEntry,
  type LedgerState,
  type ModernPresence,
  withinHistory,
} from './ledger.js';
import type { Asker } from './context.js';
import type { Intake } from './intake.js';
import { heldLedger, ledgerOrNew, ledgerToAnswerFrom, raisedCounter } from './ledger-io.js';
import { planAnswer, planStoreAway, viewOf } from './plan.js';
import { limitLegacyHistory } from './convert.js';
import { ignoredMember, withIgnored, type PresenceRequest } from './params.js';
import { withOwnReport, type OwnReport } from './own-report.js';
import type { Poll } from './report.js';
import type { Snapshot } from './snapshots.js';
import type { LedgerMemo, PresenceState } from './state.js';
import { LedgerTable } from './ledger-table.js';

/**
 * Answer building: the bytes a full presence poll gets, from the realm's ledger (ids and data,
 * ledger.ts I5–I6) and the snapshot it was answered from (who is in view, the upstream's legacy
 * answer). Bodies are built once per ledger state and reused byte for byte.
 */

/**
 * `kind` of presence_answers_total (resync: full data for a client id that could not be vouched
 * for; store_away: modern full data made from an upstream answer alone while the store was away, S3).
 */
export type AnswerKind = 'legacy_full' | 'modern_full' | 'delta' | 'resync' | 'store_away';

export interface Built {
  body: Encodable;
  kind: AnswerKind;
  /**
   * Raw bytes of the full answer the same client would get without the shim's deltas: the
   * reference of the bandwidth-saved metric (the answer itself, but for a delta). Called after
   * the answer went out; counted in steps where that takes a walk over the realm (B7).
   */
  fullEquivalentBytes(): number | Promise<number>;
}

/** Distinct bodies kept per ledger state: a client cannot grow it with made-up ids. */
const MAX_BODIES_PER_LEDGER = 32;

/** The bodies kept for a ledger state (complete scopes): the same for every caller at the same id. */
function bodiesOf(poll: Poll, ledger: LedgerState): LedgerMemo & { bodies: Map<string, Encodable> } {
  const memo = poll.ctx.presence.memo(ledger);
  memo.bodies ??= poll.ctx.snapshots.bodies(); // X2: within the answers budget, too
  if (memo.bodies.size >= MAX_BODIES_PER_LEDGER) memo.bodies.clear();
  return memo as LedgerMemo & { bodies: Map<string, Encodable> };
}

/**
 * The id as written in the answer: the client's own digits when it is their id echoed and a
 * double cannot hold it exactly (X1: never below what the client sent, not even by rounding).
 */
function idText(id: number, request: PresenceRequest): string {
  const echoed = id === request.lastUpdateId && !Number.isSafeInteger(id) && request.lastUpdateIdText !== undefined;
  return echoed ? request.lastUpdateIdText! : String(id);
}

function modernBody(serverTimestamp: number, presences: Record<string, ModernPresence>, id: number | string, ignored: string[]): Buffer {
  return Buffer.from(
    `{"result":"success","msg":"","server_timestamp":${JSON.stringify(serverTimestamp)},"presences":${JSON.stringify(presences)},"presence_last_update_id":${id}${ignoredMember(ignored)}}`,
  );
}

/** B7: users serialised per turn of the event loop; 5,000 take about 5 ms. */
const ENTRIES_PER_TURN = 5_000;

/**
 * P3, P4, P12: a modern answer built from the ledger in steps (B7: a full answer for 100k
 * users is 6 MB of JSON, never made in one block), users in id order as `JSON.stringify` of
 * the presences object would write them. The state is a value (ledger.ts), so merges in
 * between change nothing in what this answer holds.
 */
export async function modernBodyInSteps(ledger: LedgerState, q: AnswerRequest, request: PresenceRequest): Promise<Encodable> {
  const chosen: number[] = [];
  const { entries, leastId } = answerEntries(ledger, q);
  for (const [userId] of entries) {
    chosen.push(userId);
    if (chosen.length % (4 * ENTRIES_PER_TURN) === 0) await yieldTurn();
  }
  const ids = Float64Array.from(chosen).sort();
  const parts: Buffer[] = [];
  let largest = -1;
  for (let start = 0; start < ids.length; start += ENTRIES_PER_TURN) {
    if (start > 0) await yieldTurn();
    let text = '';
    for (let i = start; i < Math.min(ids.length, start + ENTRIES_PER_TURN); i++) {
      const userId = ids[i]!;
      const e = ledger.users.get(userId)!;
      // P2: both timestamps are integers, written as JSON.stringify would.
      text += `${text || start > 0 ? ',' : ''}"${userId}":{"active_timestamp":${JSON.stringify(e.active)},"idle_timestamp":${JSON.stringify(e.idle)}}`;
      if (e.changedAt > largest) largest = e.changedAt;
    }
    parts.push(Buffer.from(text));
  }
  const id = idText(answerId(Math.max(largest, leastId), q.lastUpdateId), request);
  const head = `{"result":"success","msg":"","server_timestamp":${JSON.stringify(q.serverTimestamp)},"presences":{`;
  const tail = `},"presence_last_update_id":${id}${ignoredMember(request.ignored)}}`;
  return { raw: Buffer.concat([Buffer.from(head), ...parts, Buffer.from(tail)]) };
}

/** One build per body at a time: later callers wait for the one in progress. */
function building(memo: LedgerMemo & { bodies: Map<string, Encodable> }, key: string, build: () => Promise<Encodable>): Promise<Encodable> {
  memo.building ??= new Map();
  const pending = memo.building;
  let made = pending.get(key);
  if (!made) {
    made = build().finally(() => pending.delete(key));
    pending.set(key, made);
  }
  return made;
}

/**
 * P1–P4, P10, P12, X1: the modern answer, from the newest ledger (never older than the client's
 * id). S3: a snapshot the store could not record is answered from its own data (and `own`, the
 * caller's report, P15; P14 against the copy held): a ledger copy lacks it, and its delta would
 * say nothing changed.
 */
export async function modernAnswer(poll: Poll, snapshot: Snapshot, own?: OwnReport): Promise<Built> {
  // P3: never an empty map in place of data that could not be converted.
  if (snapshot.modernError) throw snapshot.modernError;
  if (snapshot.storeAway && fromUpstreamAnswer(poll, snapshot.serverTimestamp)) return answerWithoutLedger(poll, snapshot, own);
  const { request } = poll;
  const lastUpdateId = request.lastUpdateId;
  let ledger = await ledgerToAnswerFrom(poll, snapshot.merged?.deref(), lastUpdateId);
  if (!ledger) return answerWithoutLedger(poll, snapshot, own);
  const { delta, kind, raiseTo } = planAnswer(viewOf(ledger, lastUpdateId), lastUpdateId);
  if (raiseTo !== undefined) ledger = await raisedCounter(poll, ledger, raiseTo);
  // P10: the upstream's time of the newest complete snapshot in the ledger answered from.
  const serverTimestamp = snapshot.complete ? Math.max(snapshot.serverTimestamp, ledger.completeAt) : snapshot.serverTimestamp;
  const reusable = snapshot.complete && request.ignored.length === 0 && kind !== 'resync';
  const key = `${delta ? lastUpdateId : 'full'}|${request.historyLimitDays ?? ''}|${serverTimestamp}`;
  const kept = reusable ? bodiesOf(poll, ledger) : undefined;
  let body = kept?.bodies.get(key);
  if (!body) {
    const q = {
      visible: snapshot.complete ? undefined : snapshot.modern?.keys(),
      lastUpdateId,
      delta,
      historyLimitDays: request.historyLimitDays,
      serverTimestamp,
    };
    // Callers asking for the same body meanwhile share its building (B7).
    const made = kept ? building(kept, key, () => modernBodyInSteps(ledger!, q, request)) : modernBodyInSteps(ledger, q, request);
    body = await made;
    kept?.bodies.set(key, body);
  }
  const raw = body.raw.length;
  const answeredFrom = ledger;
  return {
    body,
    kind,
    fullEquivalentBytes: () => (kind === 'delta' ? fullModernBytes(poll.ctx.presence, answeredFrom, snapshot, serverTimestamp) : raw),
  };
}

/** S3: an upstream answer no ledger holds, and what its answer takes from elsewhere. */
interface AsItCame {
  modern: ReadonlyMap<number, ModernPresence>;
  serverTimestamp: number;
  /** The ledger copy this process holds: each user's active time seen before (P14, I8) and newer observations (I3). */
  held: LedgerState | undefined;
  /** The caller's own report (P15). */
  own?: OwnReport | undefined;
}

/** S3: a user's entry in an upstream answer no ledger holds, by the ledger's own rules against the copy held (I3, I8). */
function asMerged(prev: LedgerEntry | undefined, seen: ModernPresence, serverTimestamp: number): ModernPresence {
  if (!prev) return seen;
  if (serverTimestamp < prev.seenAt) return { active_timestamp: prev.active, idle_timestamp: prev.idle };
  return keptActive(prev, seen, serverTimestamp === prev.seenAt);
}

/** S3: the presences of an upstream answer no ledger holds, as a full answer, cut by P12. */
function presencesAsTheyCame(
  a: AsItCame,
  historyLimitDays: number | undefined,
  lastUpdateId: number | undefined,
): Record<string, ModernPresence> {
  const cutoff = historyCutoff(historyLimitDays, a.serverTimestamp, lastUpdateId);
  const presences: Record<string, ModernPresence> = {};
  for (const [userId, seen] of a.modern) {
    let p = asMerged(a.held?.users.get(userId), seen, a.serverTimestamp);
    if (userId === a.own?.userId) p = withOwnReport(p, a.own.presence);
    if (withinHistory(p.idle_timestamp, cutoff)) presences[String(userId)] = p;
  }
  const own = a.own;
  if (own && !a.modern.has(own.userId) && withinHistory(own.presence.idle_timestamp, cutoff)) presences[String(own.userId)] = own.presence;
  return presences;
}

/**
 * S3 (P5, I6): full data from the upstream answer itself while the store is away, with the
 * client's own id echoed, or -1 when it sent none: no id of the shim's own, since no ledger
 * holds this data. Why this id: the web app, the one client that sends `last_update_id`,
 * asserts that every non-ping answer carries one (so not none), and a modern server never
 * answers below the client's id (X1, so not -1 for a client that sent one); it merges a full
 * answer like a delta, and sends the same id again. When the store is back, that id is vouched
 * for again and its delta holds every user whose data changed since it, which includes
 * everything the upstream changed meanwhile (or, where the store lost the ledger, it gets full
 * data and a new epoch, P5). A fresh epoch of this replica's own would have to be vouched for by
 * the others, which cannot learn of it while the store is away.
 */
function answerWithoutLedger(poll: Poll, snapshot: Snapshot, own: OwnReport | undefined): Built {
  const { request } = poll;
  const modern = snapshot.modern;
  if (!modern) throw new Error('presence snapshot without data or ledger');
  const held = heldLedger(poll);
  const asItCame = { modern, serverTimestamp: snapshot.serverTimestamp, held, own };
  const presences = presencesAsTheyCame(asItCame, request.historyLimitDays, request.lastUpdateId);
  const id = answerIdWithoutLedger(request.lastUpdateId);
  if (id > 0) poll.ctx.presence.storeAway.echoedWhileAway(poll.realm.key, id); // X1: owed to the counter
  const body = { raw: modernBody(snapshot.serverTimestamp, presences, idText(id, request), request.ignored) };
  return { body, kind: 'store_away', fullEquivalentBytes: () => body.raw.length };
}

/** S3 (plan.ts `planStoreAway`): whether an upstream answer the store could not record is answered from itself. */
function fromUpstreamAnswer(asker: Asker, serverTimestamp: number): boolean {
  const held = heldLedger(asker);
  return planStoreAway(serverTimestamp, held && newestAnswerAt(held)) === 'upstreamAnswer';
}

/** 10^0 … 10^15: the thresholds of an integer's digit count. */
const POWERS_OF_TEN = Array.from({ length: 16 }, (_, i) => 10 ** i);

/** Characters of a number as JSON writes it (a comparison per digit: this runs per user). */
function digits(n: number): number {
  if (!Number.isSafeInteger(n)) return String(n).length;
  if (n < 0) return 1 + digits(-n);
  let d = 1;
  while (d < 16 && n >= POWERS_OF_TEN[d]!) d++;
  return d;
}

/** Bytes of one user's entry in a modern answer: `"<id>":{"active_timestamp":…,"idle_timestamp":…},`. */
const ENTRY_OVERHEAD = 43;
const ENVELOPE = 120;
/** Shards (of 256 users at most) measured, or users looked at, between two pauses of a count. */
const SHARDS_PER_STEP = 32;
const USERS_PER_STEP = 8_192;
const entryBytes = (e: LedgerEntry | undefined, userId: number) =>
  e?.present ? ENTRY_OVERHEAD + digits(userId) + digits(e.active) + digits(e.idle) : 0;

function shardBytes(shard: ReadonlyMap<number, LedgerEntry>): number {
  let bytes = 0;
  shard.forEach((e, userId) => {
    bytes += entryBytes(e, userId);
  });
  return bytes;
}

/**
 * The users' part of the full modern answer at this ledger state, exact, counted once per state
 * and shared by its callers. B7: summed over the user table's shards, each shard counted once
 * for every state that shares it, so a state costs what changed since the states before it, and
 * in steps, so even a state that changed every shard is no single block. Counting every user
 * instead costs each new state the realm's size: at 100,000 users a state one own report (P15)
 * apart took 19–23 ms against 0.13–0.17 ms by shard (bench/full-answer-bytes.ts), and a busy
 * realm makes such a state per report.
 */
export function usersBytes(state: PresenceState, ledger: LedgerState): Promise<number> {
  const memo = state.memo(ledger);
  memo.usersBytes ??= LedgerTable.from(ledger.users).sumOfShards(state.usersBytesByShard, shardBytes, yieldTurn, SHARDS_PER_STEP);
  return memo.usersBytes;
}

/**
 * The size of the full modern answer at this ledger state, counted from the numbers rather
 * than by building it (a full answer is built only when a client asks for one).
 */
async function fullModernBytes(state: PresenceState, ledger: LedgerState, snapshot: Snapshot, serverTimestamp: number): Promise<number> {
  const envelope = ENVELOPE + String(serverTimestamp).length + String(ledger.lastId).length;
  if (snapshot.complete || !snapshot.modern) return envelope + (await usersBytes(state, ledger));
  let bytes = envelope;
  let looked = 0;
  for (const userId of snapshot.modern.keys()) {
    if (++looked % USERS_PER_STEP === 0) await yieldTurn();
    bytes += entryBytes(ledger.users.get(userId), userId);
  }
  return bytes;
}

/** P1, P4, P12: the upstream's legacy answer as made, with `presence_last_update_id` added. */
export async function legacyAnswer(poll: Poll, snapshot: Snapshot): Promise<Built> {
  const { request } = poll;
  const bytes = snapshot.legacyBytes;
  if (!bytes) throw new Error('legacy answer asked of a snapshot without one');
  const cutoff = historyCutoff(request.historyLimitDays, snapshot.serverTimestamp);
  // The upstream's own bytes with the id added before the closing brace: exactly as it made
  // them (P1), and no re-serialisation of a multi-megabyte answer on the event loop.
  const asMade = cutoff === undefined && request.ignored.length === 0 && !bytes.includes('"ignored_parameters_unsupported"');
  const key = `legacy|${request.historyLimitDays ?? ''}|${request.ignored.join(',')}`;
  let body = snapshot.bodies.get(key);
  if (!body) {
    if (asMade) {
      const id = await legacyId(poll, snapshot, snapshot.legacyUsers === 0);
      body = { raw: Buffer.concat([bytes.subarray(0, bytes.lastIndexOf('}')), Buffer.from(`,"presence_last_update_id":${id}}`)]) };
    } else {
      const upstream = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>;
      let presences = (upstream.presences ?? {}) as Record<string, unknown>;
      if (cutoff !== undefined) presences = limitLegacyHistory(presences, cutoff);
      const id = await legacyId(poll, snapshot, Object.keys(presences).length === 0);
      body = { raw: Buffer.from(JSON.stringify(withIgnored({ ...upstream, presences, presence_last_update_id: id }, request.ignored))) };
    }
    snapshot.bodies.set(key, body);
  }
  const raw = body.raw.length;
  return { body, kind: 'legacy_full', fullEquivalentBytes: () => raw };
}

function legacyId(poll: Poll, snapshot: Snapshot, empty: boolean): Promise<number> {
  const taken = { ledger: snapshot.merged?.deref(), modern: snapshot.modern };
  return idForLegacyPresences(poll, taken, snapshot.serverTimestamp, poll.request.historyLimitDays, empty);
}

/**
 * P4 for the upstream's legacy presences passed on (a poll or a register answer), via ledger.ts
 * `legacyAnswerId`: merged here (`modern` and the ledger after the merge), or not (7.0–8.x);
 * -1 without a store (P5).
 */
export async function idForLegacyPresences(
  asker: Asker,
  taken: { ledger: LedgerState | undefined; modern: ReadonlyMap<number, ModernPresence> | undefined },
  serverTimestamp: number,
  historyLimitDays: number | undefined,
  empty: boolean,
): Promise<number> {
  const merged = taken.ledger !== undefined && taken.modern !== undefined;
  const ledger = merged ? taken.ledger : await ledgerOrNew(asker, await ledgerToAnswerFrom(asker, undefined, undefined));
  // A legacy answer is asked for without last_update_id (P1).
  if (!ledger) return answerIdWithoutLedger(undefined);
  return legacyAnswerId(ledger, { merged, visible: merged ? taken.modern?.keys() : undefined, serverTimestamp, historyLimitDays, empty });
}

/**
 * R1 with slim_presence: a register answer's presences and id, from the newest ledger (X1,
 * I5), cut by `presence_history_limit_days` (P12); the answer's own data and -1 when the store
 * is away (S3).
 */
export async function registerPresences(
  asker: Asker,
  intake: Intake,
  modern: ReadonlyMap<number, ModernPresence>,
  complete: boolean,
  historyLimitDays: number | undefined,
): Promise<{ presences: Record<string, ModernPresence>; presenceLastUpdateId: number }> {
  const { serverTimestamp } = intake;
  // S3: presences the store could not record are answered as they came, not from a ledger copy.
  const asItCame = intake.storeAway && fromUpstreamAnswer(asker, serverTimestamp);
  if (asItCame) asker.ctx.presence.storeAway.handedOut(asker.realm.key, serverTimestamp);
  const ledger = asItCame ? undefined : await ledgerToAnswerFrom(asker, intake.ledger, undefined);
  if (ledger) {
    const visible = complete ? undefined : modern.keys();
    return answer(ledger, { visible, lastUpdateId: undefined, historyLimitDays, serverTimestamp });
  }
  return {
    presences: presencesAsTheyCame({ modern, serverTimestamp, held: heldLedger(asker) }, historyLimitDays, undefined),
    presenceLastUpdateId: answerIdWithoutLedger(undefined),
  };
}
