import { FL } from '../upstream/feature-level.js';
import { withinHistory, type ModernPresence } from './ledger.js';

/**
 * Pure conversions of upstream presence answers to the modern format (P1, P2), one per era
 * (the formats of docs/behaviour.md, P1 and P2):
 *
 * | era                 | upstream format                                   | conversion            |
 * |---------------------|---------------------------------------------------|-----------------------|
 * | 2.1 (FL 0–24)       | legacy only: per-client rows keyed by email       | legacyUserToModern    |
 * | 3.0–6.x (FL 25–177) | slim, a key missing when it has no value; idle =  | oldSlimToModern       |
 * |                     | newest *idle* report (old meaning)                |                       |
 * | 7.0–8.x (FL 178+)   | slim, both keys, modern meaning                   | exactSlimToModern     |
 *
 * Modern meaning: active_timestamp = last time the user was active; idle_timestamp = last time
 * any client reported (so idle >= active). Where the upstream has no active time, a modern
 * server sends the user's date_joined; so do we, when the realm's user list gives it.
 */

export type PresenceEra = 'legacy' | 'old-slim' | 'exact-slim';

/** The user's date_joined in seconds, or how to find it: looked up only for users never active. */
export type Joined = number | undefined | (() => number | undefined);

export function presenceEra(featureLevel: number): PresenceEra {
  if (featureLevel < FL.SLIM_PRESENCE) return 'legacy';
  return featureLevel < FL.ONE_ROW_PER_USER ? 'old-slim' : 'exact-slim';
}

const int = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? Math.floor(v) : undefined);

/**
 * 2.1–6.x legacy entry (`{"website": {client, status, timestamp, pushable}, …, "aggregated": …}`)
 * → modern: active = newest active report of any client; idle = newest report of any client.
 */
export function legacyUserToModern(entry: unknown, dateJoined: Joined): ModernPresence | undefined {
  if (!entry || typeof entry !== 'object') return undefined;
  let active: number | undefined;
  let idle: number | undefined;
  for (const [client, row] of Object.entries(entry as Record<string, unknown>)) {
    if (!row || typeof row !== 'object') continue;
    const ts = int((row as { timestamp?: unknown }).timestamp);
    if (ts === undefined) continue;
    idle = idle === undefined ? ts : Math.max(idle, ts);
    if (client !== 'aggregated' && (row as { status?: unknown }).status === 'active') {
      active = active === undefined ? ts : Math.max(active, ts);
    }
  }
  if (idle === undefined) return undefined;
  return modernPresence(active, idle, dateJoined);
}

/** 3.0–6.x slim entry: keys may be missing; idle_timestamp meant "newest idle report". */
export function oldSlimToModern(entry: unknown, dateJoined: Joined): ModernPresence | undefined {
  if (!entry || typeof entry !== 'object') return undefined;
  const a = int((entry as { active_timestamp?: unknown }).active_timestamp);
  const i = int((entry as { idle_timestamp?: unknown }).idle_timestamp);
  if (a === undefined && i === undefined) return undefined;
  return modernPresence(a, Math.max(a ?? 0, i ?? 0), dateJoined);
}

/** 7.0–8.x slim entry: exact; made integers and checked, nothing else. */
export function exactSlimToModern(entry: unknown, dateJoined: Joined): ModernPresence | undefined {
  return oldSlimToModern(entry, dateJoined);
}

/** P2: both integers, idle >= active; a missing active time is the user's date_joined, or 0. */
function modernPresence(active: number | undefined, idle: number, dateJoined: Joined): ModernPresence {
  const joined = () => (typeof dateJoined === 'function' ? dateJoined() : dateJoined);
  const a = active ?? Math.min(joined() ?? 0, idle);
  return { active_timestamp: a, idle_timestamp: Math.max(idle, a) };
}

export interface Converted {
  presences: Map<number, ModernPresence>;
  /** Legacy keys that the realm's email → id map did not know (2.1). */
  unknownEmails: string[];
}

export interface UserLookup {
  idOf(email: string): number | undefined;
  dateJoinedOf(userId: number): number | undefined;
}

/** An upstream `presences` object of the given era → modern entries keyed by user id. */
export function toModern(era: PresenceEra, presences: Record<string, unknown>, users: UserLookup): Converted {
  const out = new Map<number, ModernPresence>();
  const unknownEmails: string[] = [];
  for (const [key, entry] of Object.entries(presences)) {
    let id: number | undefined;
    if (era === 'legacy') {
      id = users.idOf(key);
      if (id === undefined) {
        unknownEmails.push(key);
        continue;
      }
    } else {
      id = /^\d+$/.test(key) ? Number(key) : undefined;
      if (id === undefined) continue;
    }
    const convert = era === 'legacy' ? legacyUserToModern : era === 'old-slim' ? oldSlimToModern : exactSlimToModern;
    const p = convert(entry, () => users.dateJoinedOf(id));
    if (p) out.set(id, p);
  }
  return { presences: out, unknownEmails };
}

/**
 * P12 on a legacy answer: drops users whose newest report (`aggregated.timestamp`) is older
 * than `cutoff` (ledger.ts `historyCutoff`: Infinity drops everyone).
 */
export function limitLegacyHistory(presences: Record<string, unknown>, cutoff: number): Record<string, unknown> {
  const out: Record<string, unknown> = Object.create(null); // a key `__proto__` stays a key
  if (cutoff === Infinity) return out;
  for (const [email, entry] of Object.entries(presences)) {
    const m = legacyUserToModern(entry, undefined);
    if (m && withinHistory(m.idle_timestamp, cutoff)) out[email] = entry;
  }
  return out;
}
