import { setImmediate } from 'node:timers/promises';
import type { IncomingMessage } from 'node:http';
import { timedUpstream, type ShimContext } from '../context.js';
import { upstreamBadResponse } from '../http/errors.js';
import { forwardedHeaders, type BufferedResponse } from '../upstream/client.js';
import type { Realm } from '../upstream/realm.js';
import type { Directory } from '../upstream/user-directory.js';
import { toModern, type PresenceEra } from './convert.js';
import { answersWithDelta, type LedgerState, type ModernPresence, type Observation } from './ledger.js';

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
  ctx: ShimContext;
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
  const date = Date.parse(String(headers.date ?? ''));
  if (Number.isFinite(date)) return date / 1000;
  throw upstreamBadResponse('presence answer without server_timestamp or Date');
}

/**
 * The upstream's presences in the modern format, or undefined where that cannot be done
 * faithfully (a 7.0–8.x legacy answer, whose per-user status is lossy: it is passed on as made
 * and not merged).
 */
export async function toModernPresences(
  a: Asker,
  format: Format,
  presences: Record<string, unknown>,
): Promise<Map<number, ModernPresence> | undefined> {
  const { ctx, req, realm, era } = a;
  if (format === 'legacy' && era === 'exact-slim') return undefined;
  if (era === 'exact-slim') return toModern(era, presences, { idOf: () => undefined, dateJoinedOf: () => undefined }).presences;
  // 2.1 needs the email → id map; 3.0–6.x may need date_joined for users never active.
  const sourceEra: PresenceEra = format === 'legacy' ? 'legacy' : era;
  const headers = forwardedHeaders(req);
  let directory: Directory | undefined;
  try {
    directory = await timedUpstream(req, () => ctx.users.get(realm, headers));
  } catch (e) {
    if (sourceEra === 'legacy') throw e; // without the email → id map there is no modern answer
    ctx.log.warn({ realm: realm.host, err: (e as Error).message }, 'user list unavailable: active_timestamp falls back to 0 where unknown');
  }
  const lookup = (d: Directory | undefined) => ({
    idOf: (email: string) => d?.byEmail.get(email)?.user_id,
    dateJoinedOf: (id: number) => {
      const t = Date.parse(d?.byId.get(id)?.date_joined ?? '');
      return Number.isFinite(t) ? Math.floor(t / 1000) : undefined;
    },
  });
  // Reading a fresh user list and converting 10k users are two long steps: not one block (B6).
  await setImmediate();
  let converted = toModern(sourceEra, presences, lookup(directory));
  // X10: an email several users share is known, and left out on purpose: no re-read for it.
  const unknown = (d: Directory | undefined) => converted.unknownEmails.filter((e) => !d?.ambiguousEmails.has(e)).length;
  if (unknown(directory) && directory) {
    // Someone the cached map does not know yet: re-read it (bounded by the directory).
    directory = await timedUpstream(req, () => ctx.users.refresh(realm, headers));
    converted = toModern(sourceEra, presences, lookup(directory));
    if (unknown(directory)) {
      ctx.log.warn({ realm: realm.host, unknown: unknown(directory) }, 'presence of users missing from the user list left out');
    }
  }
  return converted.presences;
}

/** Records an observation; undefined when the store is down (answers then carry no ids of their own, P5). */
export async function recordInLedger(a: Asker, obs: Observation): Promise<LedgerState | undefined> {
  try {
    const ledger = await a.ctx.store.merge(a.realm.key, obs);
    a.ctx.metrics.ledgerUsers.set({ realm: a.realm.host }, ledger.users.size);
    return ledger;
  } catch (e) {
    storeFailed(a, e);
    return undefined;
  }
}

export async function loadLedger(a: Asker): Promise<LedgerState | undefined> {
  try {
    return await a.ctx.store.load(a.realm.key);
  } catch (e) {
    storeFailed(a, e);
    return undefined;
  }
}

/** The newer of two copies of a realm's ledger (ids only grow, also across epochs: I1). */
export function newerLedger(a: LedgerState | undefined, b: LedgerState | undefined): LedgerState | undefined {
  if (!a) return b;
  if (!b) return a;
  return b.lastId > a.lastId ? b : a;
}

/**
 * X1: the ledger an answer for a client at `lastUpdateId` is built from: the newest this
 * process holds (the one merged with the snapshot, or a newer one it read or wrote since),
 * read from the store first when that copy is older than the client's id, or when it has none.
 * Undefined when the store cannot be reached.
 */
export async function ledgerToAnswerFrom(
  a: Asker,
  merged: LedgerState | undefined,
  lastUpdateId: number | undefined,
): Promise<LedgerState | undefined> {
  let ledger = newerLedger(merged, a.ctx.store.peek(a.realm.key));
  if (!ledger || (lastUpdateId !== undefined && lastUpdateId > ledger.lastId)) ledger = newerLedger(ledger, await loadLedger(a));
  return ledger;
}

/**
 * X1, I6: for a client id this ledger cannot vouch for, above its counter: raise the counter
 * to it first (where it is plausible; the store decides by its epoch clock), so the id echoed
 * with the full answer is then vouched for and the next delta is exact.
 */
export async function raisedForUnvouchedId(a: Asker, ledger: LedgerState, lastUpdateId: number | undefined): Promise<LedgerState> {
  if (lastUpdateId === undefined || lastUpdateId <= ledger.lastId || answersWithDelta(ledger, lastUpdateId)) return ledger;
  try {
    return await a.ctx.store.raiseCounter(a.realm.key, lastUpdateId);
  } catch (e) {
    storeFailed(a, e);
    return ledger; // the id is echoed all the same (I6); it stays unvouched, so the next poll is full again
  }
}

/** P4 on 7.0–8.x legacy answers: a ledger to take an id from, created when the realm has none yet. */
export async function ledgerOrNew(a: Asker, ledger: LedgerState | undefined): Promise<LedgerState | undefined> {
  if (ledger) return ledger;
  try {
    return await a.ctx.store.raiseCounter(a.realm.key, 0);
  } catch (e) {
    storeFailed(a, e);
    return undefined;
  }
}

let lastStoreWarning = 0;
/** The store counts its own errors (storeErrors); here only the degradation is logged. */
function storeFailed(a: Asker, e: unknown): void {
  const now = Date.now();
  if (now - lastStoreWarning > 10_000) {
    lastStoreWarning = now;
    a.ctx.log.warn({ err: (e as Error).message }, 'presence store unavailable: answering with full data and no ids until it is back');
  }
}

/** What the ledger knows after an upstream answer was taken in, for building answers from it. */
export interface Intake {
  serverTimestamp: number;
  /** Modern entries by user id, also the users in view (P7); undefined when not convertible. */
  modern: ReadonlyMap<number, ModernPresence> | undefined;
  /** Why a legacy answer could not be converted (2.1 without its user list), if it could not. */
  modernError?: Error | undefined;
  ledger: LedgerState | undefined;
}

/** Takes in one full upstream presence answer: converts and records it. */
export async function takeInAnswer(
  a: Asker,
  format: Format,
  presences: Record<string, unknown>,
  serverTimestamp: number,
  complete: boolean,
): Promise<Intake> {
  let modern: Map<number, ModernPresence> | undefined;
  let modernError: Error | undefined;
  try {
    modern = await toModernPresences(a, format, presences);
  } catch (e) {
    // A legacy answer is still good for legacy callers (E4); modern ones get this error.
    if (format !== 'legacy') throw e;
    modernError = e as Error;
  }
  // Let other requests run between converting and merging a large snapshot (B6).
  await setImmediate();
  const ledger = modern ? await recordInLedger(a, { serverTimestamp, presences: modern, complete }) : await loadLedger(a);
  return { serverTimestamp, modern, modernError, ledger };
}
