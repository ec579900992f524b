import { isOwner } from './fl008-is-owner.js';
import { avatarGuestActiveTimezoneJoined } from './fl010-avatar-guest-active-timezone-joined.js';
import { role } from './fl059-role.js';
import { isBillingAdmin } from './fl073-is-billing-admin.js';
import { deliveryEmail } from './fl163-delivery-email.js';
import type { Lookups, Need, OwnUser, ProfileChange, Source } from './types.js';

export type { Lookups, Need, OwnUser, ProfileChange, Source } from './types.js';

/**
 * U2: the own-profile version changes, in feature-level order. Each lines up with one entry of
 * Zulip's API changelog; later ones may read what earlier ones added (role reads is_owner).
 */
export const CHANGES: readonly ProfileChange[] = [isOwner, avatarGuestActiveTimezoneJoined, role, isBillingAdmin, deliveryEmail];

/** The changes an upstream at `featureLevel` needs for this answer: newer than it, with a field missing. */
export function pendingChanges(featureLevel: number, user: OwnUser): ProfileChange[] {
  return CHANGES.filter((c) => c.featureLevel > featureLevel && c.fields.some((f) => !(f in user)));
}

export function needsOf(changes: readonly ProfileChange[]): Set<Need> {
  return new Set(changes.flatMap((c) => c.needs));
}

export interface Backfilled {
  user: Record<string, unknown>;
  /** Fields added, in the order added (U4). */
  added: string[];
  /** Where each added field came from. */
  sources: Record<string, Source>;
}

/** Applies the changes in order; U1: a field the upstream sent is never touched. Pure. */
export function applyChanges(upstream: OwnUser, changes: readonly ProfileChange[], found: Lookups): Backfilled {
  const user: Record<string, unknown> = { ...upstream };
  const added: string[] = [];
  const sources: Record<string, Source> = {};
  for (const change of changes) {
    const fills = change.fill(user, found);
    for (const field of change.fields) {
      const fill = fills[field];
      if (field in user || !fill) continue;
      user[field] = fill.value;
      added.push(field);
      sources[field] = fill.source;
    }
  }
  return { user, added, sources };
}
