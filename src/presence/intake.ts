import { setImmediate } from 'node:timers/promises';
import type { IncomingMessage } from 'node:http';
import type { PresenceContext } from './context.js';
import { timedUpstream } from '../observability/request-facts.js';
import { STORE_AWAY_PRESENCE } from '../observability/store-away.js';
import { upstreamBadResponse } from '../http/errors.js';
import { forwardedHeaders, type ArrivingResponse, type BufferedResponse, type UpstreamCall } from '../upstream/client.js';
import { fetchLargeHeadFirst } from '../upstream/large-fetch.js';
import type { Realm } from '../upstream/realm.js';
import type { Directory } from '../upstream/user-directory.js';
import { CompactPresences, modernFromColumns, type PresenceColumns } from './columns.js';
import { planLedger, viewOf } from './plan.js';
import { toModern, type Converted, type PresenceEra, type UserLookup } from './convert.js';
import { prepareMerge, timeOfDateHeader, type LedgerState, type ModernPresence, type Observation } from './ledger.js';

/**
 * The one path by which upstream presence reaches the realm's ledger, for presence polls and
 * register answers alike: convert the era's format to the modern one (P2), merge (P3–P7); and
 * the one way an answer gets the ledger it is built from (X1: never older than the client's id).
 *
 * Words: an upstream answer is *taken in* (converted and merged, `takeInAnswer`); an
 * observation is *recorded* in the realm's ledger (`recordInLedger`, the store's `merge`).
 */

/** Who is asking, about which realm, on which era. */
export interface Asker {
  ctx: PresenceContext;
  req: IncomingMessage;
  realm: Realm;
  era: PresenceEra;
}

/** Format the upstream answered in: legacy (email keys) or slim (user ids). */
export type Format = 'legacy' | 'slim';

/** The upstream's time for an answer (P6): its server_timestamp, else its Date header. */
export function upstreamTime(body: Record<string, unknown>, headers: BufferedResponse['headers']): number {
  const ts = body.server_timestamp;
  if (typeof ts === 'number' && Number.isFinite(ts)) return ts;
  const date = dateHeaderTime(headers);
  if (date !== undefined) return date;
  throw upstreamBadResponse('presence answer without server_timestamp or Date');
}

/**
 * The upstream's time by its `Date` header (P6), dated at the end of that second; undefined
 * without one. It never outranks an answer of that second with a `server_timestamp` (ledger.ts
 * `upstreamOrder`, I3).
 */
export function dateHeaderTime(headers: BufferedResponse['headers']): number | undefined {
  const date = Date.parse(String(headers.date ?? ''));
  return Number.isFinite(date) ? timeOfDateHeader(date) : undefined;
}

/** Presences as the upstream sent them (parsed), or read into columns off the main thread (B7). */
export type UpstreamPresences = Record<string, unknown> | PresenceColumns;

const isColumns = (p: UpstreamPresences): p is PresenceColumns => p.active instanceof Float64Array && typeof p.count === 'number';

function convert(era: PresenceEra, presences: UpstreamPresences, users: UserLookup): Promise<Converted> | Converted {
  return isColumns(presences) ? modernFromColumns(presences, users) : toModern(era, presences, users);
}

/**
 * B7: a full presence answer's bytes read off the main thread: its top-level fields, and its
 * presences in columns for the conversion the era and format need; and the bytes again, to be
 * used in place of those passed in (parse-worker.ts moves them to its thread and back).
 */
export async function readPresenceAnswer(a: Asker, format: Format, bytes: Buffer): Promise<{ columns: PresenceColumns; bytes: Buffer }> {
  const era = format === 'legacy' ? (a.era === 'exact-slim' ? undefined : 'legacy') : a.era;
  // Legacy keys are resolved where the answer is read, through the realm's email → id map;
  // without it, toModernPresences says why (E2).
  const users =
    era === 'legacy'
      ? await timedUpstream(a.req, () => a.ctx.users.get(a.realm, forwardedHeaders(a.req))).catch(() => undefined)
      : undefined;
  return a.ctx.parser.presenceAnswer(bytes, era, users?.emailTable());
}

/**
 * B7: a full presence fetch, bounded by memory.largeAnswerBytes (the limit is logged once),
 * resolved at its head: the body of a large realm's answer takes a while longer.
 */
export function fetchFullPresence(a: Asker, call: UpstreamCall): Promise<ArrivingResponse> {
  const { ctx } = a;
  const maxBytes = ctx.config.memory.largeAnswerBytes;
  return fetchLargeHeadFirst(ctx.client, call, maxBytes, (bytes) => {
    if (ctx.presence.tooLargeLogged) return;
    ctx.presence.tooLargeLogged = true;
    ctx.log.warn(
      { realm: a.realm.host, bytes, maxBytes },
      'presence answer larger than memory.largeAnswerBytes: full polls fail with UPSTREAM_BAD_RESPONSE; raise memory.largeAnswerBytes',
    );
  });
}

/**
 * The upstream's presences in the modern format, or undefined where that cannot be done
 * faithfully (a 7.0–8.x legacy answer, whose per-user status is lossy: it is passed on as made
 * and not merged).
 */
async function toModernPresences(
  asker: Asker,
  format: Format,
  presences: UpstreamPresences,
): Promise<Map<number, ModernPresence> | undefined> {
  const { ctx, req, realm, era } = asker;
  if (format === 'legacy' && era === 'exact-slim') return undefined;
  if (era === 'exact-slim') return (await convert(era, presences, { idOf: () => undefined, dateJoinedOf: () => undefined })).presences;
  // 2.1 needs the email → id map; 3.0–6.x may need date_joined for users never active.
  const sourceEra: PresenceEra = format === 'legacy' ? 'legacy' : era;
  const headers = forwardedHeaders(req);
  let directory: Directory | undefined;
  try {
    directory = await timedUpstream(req, () => ctx.users.get(realm, headers));
  } catch (e) {
    if (sourceEra === 'legacy') throw e; // without the email → id map there is no modern answer
    ctx.log.warn({ realm: realm.host, err: e }, 'user list unavailable: active_timestamp falls back to 0 where unknown');
  }
  const lookup = (d: Directory | undefined): UserLookup => ({
    idOf: (email: string) => d?.idOf(email),
    dateJoinedOf: (id: number) => d?.dateJoinedOf(id),
  });
  // Reading a fresh user list and converting 10k users are two long steps: not one block (B6).
  await setImmediate();
  let converted = await convert(sourceEra, presences, lookup(directory));
  // X10: an email several users share is known, and left out on purpose: no re-read for it.
  const unknown = (d: Directory | undefined) => converted.unknownEmails.filter((e) => !d?.ambiguousEmails.has(e)).length;
  if (unknown(directory) && directory) {
    // Someone the cached map does not know yet: re-read it (bounded by the directory).
    directory = await timedUpstream(req, () => ctx.users.refresh(realm, headers));
    converted = await convert(sourceEra, presences, lookup(directory));
    if (unknown(directory)) {
      ctx.log.warn({ realm: realm.host, unknown: unknown(directory) }, 'presence of users missing from the user list left out');
    }
  }
  return converted.presences;
}

/** X14: beyond the upstream deadline, how much later than it an answer may still be merged (parse, merge, store). */
const LATE_MARGIN_SECONDS = 60;

/**
 * Records an observation; undefined when the store is away (S3: answers from that observation
 * are then made from its own data, answers.ts). Until an upstream answer at least as new is
 * recorded, this process's ledger copies lack what it took in, and none answers alone (sharing.ts).
 */
export async function recordInLedger(asker: Asker, observation: Observation): Promise<LedgerState | undefined> {
  const { ctx, realm } = asker;
  // X14: an answer can be late by the upstream deadline (X3); older than that, the clock stepped back.
  const obs = { ...observation, maxLateSeconds: ctx.config.upstream.timeoutMs / 1000 + LATE_MARGIN_SECONDS };
  // A caller's own report is no upstream answer: it says nothing of anyone else (P15).
  const answer = observation.report !== true;
  try {
    await raiseOwedCounter(asker);
    // B7: merged in steps on the ledger this process holds; the store takes that result when
    // the realm's ledger is still the same one, rebases it over the few changes made since
    // (other polls' own reports), and merges again otherwise (I7, ledger.ts `applyChange`).
    const base = ctx.store.peek(realm.key);
    const prepared = base && (await prepareMerge(base, obs, () => setImmediate()));
    const ledger = await ctx.store.merge(realm.key, obs, prepared);
    ctx.metrics.ledgerUsers.set({ realm: realm.host }, ledger.users.size);
    if (answer) ctx.presence.storeAway.recorded(realm.key, obs.serverTimestamp, obs.maxLateSeconds);
    return ledger;
  } catch (e) {
    storeFailed(asker, e);
    if (answer) ctx.presence.storeAway.notRecorded(realm.key, obs.serverTimestamp);
    return undefined;
  }
}

/**
 * S3, X1: before this process records anything in a realm's ledger again, the counter raised to
 * the largest id it echoed while the store was away (state.ts `echoedWhileAway`).
 */
async function raiseOwedCounter(asker: Asker): Promise<void> {
  const { ctx, realm } = asker;
  const owed = ctx.presence.storeAway.takeEchoed(realm.key);
  if (owed === undefined) return;
  try {
    await ctx.store.raiseCounter(realm.key, owed);
  } catch (e) {
    ctx.presence.storeAway.echoedWhileAway(realm.key, owed); // still owed
    throw e;
  }
}

export async function loadLedger(asker: Asker): Promise<LedgerState | undefined> {
  try {
    return await asker.ctx.store.load(asker.realm.key);
  } catch (e) {
    storeFailed(asker, e);
    return undefined;
  }
}

/** The newer of two copies of a realm's ledger (ids only grow, also across epochs: I1). */
function newerLedger(one: LedgerState | undefined, other: LedgerState | undefined): LedgerState | undefined {
  if (!one) return other;
  if (!other) return one;
  return other.lastId > one.lastId ? other : one;
}

/**
 * X1: the ledger an answer for a client at `lastUpdateId` is built from (plan.ts `planLedger`):
 * the newest this process holds (the one merged with the snapshot, or a newer one it read or
 * wrote since) when that copy vouches for the client's id, so a delta from it misses nothing
 * the client saw. Otherwise the answer is full data, and the store is read first: the client
 * may have seen newer data through another replica (an id above this copy's, or one that says
 * nothing, as a garbage id or none does), and full data older than that would take it back in
 * time. Undefined when the store cannot be reached and this process holds no copy.
 */
export async function ledgerToAnswerFrom(
  asker: Asker,
  merged: LedgerState | undefined,
  lastUpdateId: number | undefined,
): Promise<LedgerState | undefined> {
  const held = newerLedger(merged, asker.ctx.store.peek(asker.realm.key));
  if (planLedger(held && viewOf(held, lastUpdateId)) === 'held') return held;
  return newerLedger(held, await loadLedger(asker));
}

/**
 * X1, I6: the counter raised past a client id this ledger cannot vouch for (plan.ts `planAnswer`
 * says when), where plausible and the realm has raises left (the store decides by its epoch
 * clock), so the full answer carries the raise's mark and the next delta is exact.
 */
export async function raisedCounter(asker: Asker, ledger: LedgerState, to: number): Promise<LedgerState> {
  try {
    return await asker.ctx.store.raiseCounter(asker.realm.key, to);
  } catch (e) {
    storeFailed(asker, e);
    // The id is echoed all the same (I6): unvouched, so the next poll is full again, and owed
    // to the counter once the store is back (S3).
    asker.ctx.presence.storeAway.echoedWhileAway(asker.realm.key, to);
    return ledger;
  }
}

/** P4 on 7.0–8.x legacy answers: a ledger to take an id from, created when the realm has none yet. */
export async function ledgerOrNew(asker: Asker, ledger: LedgerState | undefined): Promise<LedgerState | undefined> {
  if (ledger) return ledger;
  try {
    return await asker.ctx.store.raiseCounter(asker.realm.key, 0);
  } catch (e) {
    storeFailed(asker, e);
    return undefined;
  }
}

/** The store counts its own errors (storeErrors); here only what presence does meanwhile is logged (S3). */
function storeFailed(asker: Asker, e: unknown): void {
  const now = Date.now();
  if (now - asker.ctx.presence.storeWarnedAt > 10_000) {
    asker.ctx.presence.storeWarnedAt = now;
    asker.ctx.log.warn({ err: e }, `presence store unavailable: ${STORE_AWAY_PRESENCE}`);
  }
}

/** What the ledger knows after an upstream answer was taken in, for building answers from it. */
export interface Intake {
  serverTimestamp: number;
  /** Modern entries by user id, also the users in view (P7); undefined when not convertible. */
  modern: ReadonlyMap<number, ModernPresence> | undefined;
  /** Why a legacy answer could not be converted (2.1 without its user list), if it could not. */
  modernError?: Error | undefined;
  /**
   * The ledger after the merge; undefined when nothing was merged (not convertible: the answer's
   * id is then taken from the newest ledger where it is made, answers.ts) or the store is away.
   */
  ledger: LedgerState | undefined;
  /**
   * S3: the modern presences could not be recorded (the store was away). No ledger copy holds
   * them, so answers are made from them alone: full data, with no id of the shim's own.
   */
  storeAway: boolean;
}

/** Takes in one full upstream presence answer: converts and records it. */
export async function takeInAnswer(
  asker: Asker,
  format: Format,
  presences: UpstreamPresences,
  serverTimestamp: number,
  complete: boolean,
  dateTimed = false,
): Promise<Intake> {
  let modern: Map<number, ModernPresence> | undefined;
  let modernError: Error | undefined;
  try {
    modern = await toModernPresences(asker, format, presences);
  } catch (e) {
    // A legacy answer is still good for legacy callers (E4); modern ones get this error.
    if (format !== 'legacy') throw e;
    modernError = e as Error;
  }
  // Let other requests run between converting and merging a large snapshot (B6).
  await setImmediate();
  // I8: every era but 2.1's has invisible mode, whose backdating is taken as it is.
  const invisibleMode = asker.era !== 'legacy';
  const ledger = modern
    ? await recordInLedger(asker, { serverTimestamp, presences: modern, complete, dateTimed, invisibleMode })
    : undefined;
  // X2: what is kept of the answer for its window (a snapshot), compact.
  const kept = modern && (await CompactPresences.of(modern));
  return { serverTimestamp, modern: kept, modernError, ledger, storeAway: modern !== undefined && ledger === undefined };
}
