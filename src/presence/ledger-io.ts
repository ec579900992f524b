import { setImmediate } from 'node:timers/promises';
import { STORE_AWAY_PRESENCE } from '../observability/store-away.js';
import type { Asker } from './context.js';
import { prepareMerge, type LedgerState, type Observation } from './ledger.js';
import { planLedger, viewOf } from './plan.js';

/**
 * Every read and write of a realm's ledger in the store (ledger-store.ts), for the presence poll
 * and the register answer alike; nothing else in presence/ calls the store. Each call says what
 * the store's absence means for it (S3): a read gives undefined, a write is owed or dropped, and
 * the log says so once in a while.
 *
 * - `heldLedger`: this process's newest copy, without asking the store.
 * - `loadLedger`: the store's ledger now.
 * - `recordInLedger`: an observation merged (an upstream answer, or a caller's own report, P15).
 * - `ledgerToAnswerFrom`: the ledger an answer is built from (X1, plan.ts `planLedger`).
 * - `raisedCounter`, `ledgerOrNew`: the counter raised past a client's id (X1), or created (P4).
 */

/** This process's newest copy of the realm's ledger (the store's `peek`): never older than one it answered from (X1). */
export function heldLedger(asker: Asker): LedgerState | undefined {
  return asker.ctx.store.peek(asker.realm.key);
}

/** X14: beyond the upstream deadline, how much later than it an answer may still be merged (parse, merge, store). */
const LATE_MARGIN_SECONDS = 60;

/**
 * B7: the longest a prepared merge runs before it lets the event loop turn (other polls are
 * answered meanwhile), whatever the realm's size or the machine's speed.
 */
const MERGE_SLICE_MS = 8;

/** A pause that lets the event loop turn once `sliceMs` of work has run since the last turn, else none. */
function turnsEvery(sliceMs: number): () => Promise<void> | undefined {
  let since = performance.now();
  return () => {
    if (performance.now() - since < sliceMs) return undefined;
    return setImmediate().then(() => {
      since = performance.now();
    });
  };
}

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
    const base = heldLedger(asker);
    const prepared = base && (await prepareMerge(base, obs, turnsEvery(MERGE_SLICE_MS)));
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
  const held = newerLedger(merged, heldLedger(asker));
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
