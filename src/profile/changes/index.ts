import { botOwnerId } from './fl001-bot-owner-id.js';
import { isOwner } from './fl008-is-owner.js';
import { avatarGuestActiveTimezoneJoined } from './fl010-avatar-guest-active-timezone-joined.js';
import { role } from './fl059-role.js';
import { isBillingAdmin } from './fl073-is-billing-admin.js';
import { isSystemBot } from './fl083-is-system-bot.js';
import { deliveryEmail } from './fl163-delivery-email.js';
import type { Lookups, Need, ProfileChange, Source, UserObject } from './types.js';

export type { Lookups, Need, OwnUser, ProfileChange, Source, UserObject } from './types.js';

/**
 * Checks a bundle of changes when it is built (like Cadwyn's VersionBundle): feature levels
 * strictly ascending, each field and each feature name introduced once. Throws on the first fault.
 */
export function checkedBundle(changes: readonly ProfileChange[]): readonly ProfileChange[] {
  const fields = new Set<string>();
  const features = new Set<string>();
  let previous = 0;
  for (const c of changes) {
    if (!Number.isInteger(c.featureLevel) || c.featureLevel <= previous) {
      throw new Error(`profile changes: feature level ${c.featureLevel} (${c.feature}) is not above ${previous}`);
    }
    previous = c.featureLevel;
    if (features.has(c.feature)) throw new Error(`profile changes: feature ${c.feature} named twice`);
    features.add(c.feature);
    for (const f of c.fields) {
      if (fields.has(f)) throw new Error(`profile changes: field ${f} introduced twice (again at ${c.featureLevel})`);
      fields.add(f);
    }
  }
  return Object.freeze([...changes]);
}

/**
 * U2, V1: the user-object version changes, in feature-level order, shared by the own profile
 * and every other user object. Each lines up with one entry of Zulip's API changelog; later
 * ones may read what earlier ones added (role reads is_owner).
 */
export const CHANGES: readonly ProfileChange[] = checkedBundle([
  botOwnerId,
  isOwner,
  avatarGuestActiveTimezoneJoined,
  role,
  isBillingAdmin,
  isSystemBot,
  deliveryEmail,
]);

/** The feature level from which an upstream's user objects lack nothing the shim adds. */
export const COMPLETE_FROM_LEVEL = CHANGES[CHANGES.length - 1]!.featureLevel;

/** The changes newer than an upstream at `featureLevel`. */
export function changesAbove(featureLevel: number): ProfileChange[] {
  return CHANGES.filter((c) => c.featureLevel > featureLevel);
}

/** What the shim emulates in user objects for an upstream at `featureLevel` (T2). */
export function emulatedUserFeatures(featureLevel: number): string[] {
  return changesAbove(featureLevel).map((c) => c.feature);
}

/** The changes an upstream at `featureLevel` needs for this answer: newer than it, with a field missing. */
export function pendingChanges(featureLevel: number, user: UserObject): ProfileChange[] {
  return changesAbove(featureLevel).filter((c) => c.fields.some((f) => !(f in user)));
}

export function needsOf(changes: readonly ProfileChange[]): Set<Need> {
  return new Set(changes.flatMap((c) => c.needs));
}

/** The fields added to one or many objects, in the order first added (U4), and their sources. */
export interface Added {
  added: string[];
  /** Where each added field came from; `fallback` wins over the others for a list. */
  sources: Record<string, Source>;
}

export interface Backfilled extends Added {
  user: Record<string, unknown>;
}

export function noneAdded(): Added {
  return { added: [], sources: {} };
}

/**
 * Applies the changes in order to `user` itself; U1: a field the upstream sent is never
 * touched. Records what was added in `into`. Pure but for those two objects.
 */
export function backfillInPlace(user: Record<string, unknown>, changes: readonly ProfileChange[], found: Lookups, into: Added): void {
  for (const change of changes) {
    if (change.fields.every((f) => f in user)) continue;
    const fills = change.fill(user, found);
    for (const field of change.fields) {
      const fill = fills[field];
      if (field in user || !fill) continue;
      user[field] = fill.value;
      const seen = into.sources[field];
      if (seen === undefined) into.added.push(field);
      if (seen === undefined || fill.source === 'fallback') into.sources[field] = fill.source;
    }
  }
}

/** Applies the changes in order to a copy of `upstream`; U1: a field the upstream sent is never touched. Pure. */
export function applyChanges(upstream: UserObject, changes: readonly ProfileChange[], found: Lookups): Backfilled {
  const user: Record<string, unknown> = { ...upstream };
  const into = noneAdded();
  backfillInPlace(user, changes, found, into);
  return { user, ...into };
}
