import { setImmediate } from 'node:timers/promises';
import type { Asker } from './context.js';
import { timedUpstream } from '../observability/request-facts.js';
import { forwardedHeaders, type ArrivingResponse, type UpstreamCall } from '../upstream/client.js';
import { fetchLargeHeadFirst } from '../upstream/large-fetch.js';
import type { Directory } from '../upstream/user-directory.js';
import { CompactPresences, modernFromColumns, type PresenceColumns } from './columns.js';
import { toModern, type Converted, type PresenceEra, type UserLookup } from './convert.js';
import type { LedgerState, ModernPresence } from './ledger.js';
import { recordInLedger } from './ledger-io.js';

/**
 * The one path by which upstream presence reaches the realm's ledger, for presence polls and
 * register answers alike: read the answer (B7), convert the era's format to the modern one
 * (P2), and record it (P3–P7, through ledger-io.ts).
 *
 * Words: an upstream answer is *taken in* (read, converted and recorded, `takeInAnswer`).
 */

/** Format the upstream answered in: legacy (email keys) or slim (user ids). */
export type Format = 'legacy' | 'slim';

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
