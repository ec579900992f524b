import type { Member } from '../../upstream/user-directory.js';

/**
 * The vocabulary of the own-profile version changes (U2): each change names the feature level
 * that introduced its fields, what it needs looked up, and one pure transform.
 */

/** An own-user answer as the upstream sent it (plus what earlier changes added). */
export type OwnUser = Readonly<Record<string, unknown>>;

/** What a change may need from outside the answer itself. */
export type Need = 'member' | 'delivery_email';

/** Values looked up for the caller; a missing one is a lookup that failed or found nothing. */
export interface Lookups {
  /** The caller's row in the realm's user list (GET /users). */
  member?: Member | undefined;
  /** The caller's real email address (POST /register with realm_user). */
  deliveryEmail?: string | undefined;
}

/**
 * Where an added value came from: `lookup` (the upstream told the shim), `rule` (the value is
 * fixed by the upstream's era, e.g. no owners before feature level 8), `fallback` (the lookup
 * that would have told failed; a documented rule stands in, and the answer says so).
 */
export type Source = 'lookup' | 'rule' | 'fallback';

export interface Fill {
  value: unknown;
  source: Source;
}

export interface ProfileChange {
  /** The feature level that introduced the fields: the change applies to upstreams below it. */
  readonly featureLevel: number;
  /** The fields it adds, in the order they are added. */
  readonly fields: readonly string[];
  readonly needs: readonly Need[];
  /** Pure: a value for each of `fields`, given the answer so far and the lookups. */
  fill(user: OwnUser, found: Lookups): Record<string, Fill>;
}
