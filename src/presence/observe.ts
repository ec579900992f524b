import { setImmediate } from 'node:timers/promises';
import type { IncomingMessage } from 'node:http';
import { timedUpstream, type ShimContext } from '../context.js';
import { upstreamBadResponse } from '../http/errors.js';
import { forwardedHeaders, type BufferedResponse, type UpstreamCall } from '../upstream/client.js';
import { fetchLarge } from '../upstream/large-fetch.js';
import type { Realm } from '../upstream/realm.js';
import type { Directory } from '../upstream/user-directory.js';
import { modernFromColumns, type PresenceColumns } from '../upstream/large-answers.js';
import { toModern, type Converted, type PresenceEra, type UserLookup } from './convert.js';
import { answer, idAsOf, type LedgerState, type ModernPresence, type Observation } from './ledger.js';

/**
 * The one path by which upstream presence reaches the realm's ledger, for presence polls and
 * register answers alike: convert the era's format to the modern one (P2), merge (P3–P7).
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

/** Presences as the upstream sent them (parsed), or read into columns off the main thread (B7). */
export type UpstreamPresences = Record<string, unknown> | PresenceColumns;

const isColumns = (p: UpstreamPresences): p is PresenceColumns => p.active instanceof Float64Array && typeof p.count === 'number';

function convert(era: PresenceEra, presences: UpstreamPresences, users: UserLookup): Promise<Converted> | Converted {
  return isColumns(presences) ? modernFromColumns(presences, users) : toModern(era, presences, users);
}

/**
 * B7: a full presence answer's bytes read off the main thread: its top-level fields, and its
 * presences in columns for the conversion the era and format need.
 */
export async function readPresenceAnswer(a: Asker, format: Format, bytes: Buffer): Promise<PresenceColumns> {
  const era = format === 'legacy' ? (a.era === 'exact-slim' ? undefined : 'legacy') : a.era;
  // Legacy keys are resolved where the answer is read, through the realm's email → id map;
  // without it, toModernPresences says why (E2).
  const users =
    era === 'legacy'
      ? await timedUpstream(a.req, () => a.ctx.users.get(a.realm, forwardedHeaders(a.req))).catch(() => undefined)
      : undefined;
  return a.ctx.users.parser.presenceAnswer(bytes, era, users?.emailTable());
}

/**
 * A legacy answer kept for callers who get it re-serialised (P12's limit, P11's list, replicas):
 * its top-level fields, and its presences parsed from the bytes only when one of them asks (B7:
 * the common legacy answer is the upstream's bytes; a parsed copy would take five times those).
 */
export function legacyBodyOf(top: Record<string, unknown>, bytes: Buffer): Record<string, unknown> {
  // Not kept once parsed (X2): what is built from it is cached, within the answers budget.
  return Object.defineProperty({ ...top }, 'presences', {
    enumerable: true,
    get: () => (JSON.parse(bytes.toString('utf8')) as Record<string, unknown>).presences,
  });
}

const tooLargeLogged = new WeakSet<ShimContext>();

/** B7: a full presence fetch, bounded by memory.largeAnswerBytes; the limit is logged once. */
export function fetchFullPresence(a: Asker, call: UpstreamCall): Promise<BufferedResponse> {
  const { ctx } = a;
  const maxBytes = ctx.config.memory.largeAnswerBytes;
  return fetchLarge(ctx.client, call, maxBytes, (bytes) => {
    if (tooLargeLogged.has(ctx)) return;
    tooLargeLogged.add(ctx);
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
export async function toModernPresences(
  a: Asker,
  format: Format,
  presences: UpstreamPresences,
): Promise<Map<number, ModernPresence> | undefined> {
  const { ctx, req, realm, era } = a;
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
    ctx.log.warn({ realm: realm.host, err: (e as Error).message }, 'user list unavailable: active_timestamp falls back to 0 where unknown');
  }
  const lookup = (d: Directory | undefined): UserLookup => ({
    idOf: (email: string) => d?.idOf(email),
    dateJoinedOf: (id: number) => d?.dateJoinedOf(id),
  });
  // Reading a fresh user list and converting 10k users are two long steps: not one block (B6).
  await setImmediate();
  let converted = await convert(sourceEra, presences, lookup(directory));
  if (converted.unknownEmails.length && directory) {
    // Someone the cached map does not know yet: re-read it (bounded by the directory).
    directory = await timedUpstream(req, () => ctx.users.refresh(realm, headers));
    converted = await convert(sourceEra, presences, lookup(directory));
    if (converted.unknownEmails.length) {
      ctx.log.warn({ realm: realm.host, unknown: converted.unknownEmails.length }, 'presence of users missing from the user list left out');
    }
  }
  return converted.presences;
}

/** Merges an observation; undefined when the store is down (answers then carry no ids, P5). */
export async function observe(a: Asker, obs: Observation): Promise<LedgerState | undefined> {
  try {
    const ledger = await a.ctx.store.observe(a.realm.key, obs);
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

let lastStoreWarning = 0;
/** The store counts its own errors (storeErrors); here only the degradation is logged. */
function storeFailed(a: Asker, e: unknown): void {
  const now = Date.now();
  if (now - lastStoreWarning > 10_000) {
    lastStoreWarning = now;
    a.ctx.log.warn({ err: (e as Error).message }, 'presence store unavailable: answering with full data and no ids until it is back');
  }
}

/** What the ledger knows after an upstream answer, for building answers from it. */
export interface Observed {
  serverTimestamp: number;
  /** Modern entries by user id, also the users in view (P7); undefined when not convertible. */
  modern: ReadonlyMap<number, ModernPresence> | undefined;
  /** Why a legacy answer could not be converted (2.1 without its user list), if it could not. */
  modernError?: Error | undefined;
  ledger: LedgerState | undefined;
}

/** Converts and merges one full upstream presence answer. */
export async function observeAnswer(
  a: Asker,
  format: Format,
  presences: UpstreamPresences,
  serverTimestamp: number,
  complete: boolean,
): Promise<Observed> {
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
  const ledger = modern ? await observe(a, { serverTimestamp, presences: modern, complete }) : await loadLedger(a);
  return { serverTimestamp, modern, modernError, ledger };
}

/**
 * P4 for an answer that passes the upstream's legacy presences on: on 2.1–6.x they were merged,
 * and the id is the largest among the users shown; on 7.0–8.x they were not (lossy), and the id
 * is the one every change before this answer is covered by. -1 without a ledger (P5).
 */
export function legacyAnswerId(o: Observed, historyLimitDays: number | undefined): number {
  if (o.ledger && o.modern) {
    return answer(o.ledger, { visible: o.modern.keys(), lastUpdateId: undefined, historyLimitDays, serverTimestamp: o.serverTimestamp })
      .presenceLastUpdateId;
  }
  return o.ledger ? idAsOf(o.ledger, o.serverTimestamp) : -1;
}
