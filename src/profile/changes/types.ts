import type { Member } from '../../upstream/user-directory.js';

/**
 * The vocabulary of the user-object version changes (U2, V1): each change names the feature
 * level that introduced its fields, what it needs looked up, and one pure transform. The same
 * changes fill the own profile (GET /users/me) and every other user object (GET /users,
 * GET /users/{id|email}, register's user lists).
 */

/** A user object as the upstream sent it (plus what earlier changes added). */
export type UserObject = Readonly<Record<string, unknown>>;
/** The own user (GET /users/me): one user object plus its own extras. */
export type OwnUser = UserObject;

/** What a change may need from outside the object itself. */
export type Need = 'member' | 'delivery_email';

/** Values looked up for the object; a missing one is a lookup that failed or found nothing. */
export interface Lookups {
  /**
   * Whose object this is: the caller's own (GET /users/me, its own row; the default) or
   * another user's, whose real address the caller may not see (V2).
   */
  subject?: 'own' | 'other';
  /** The user's row in the realm's user list (GET /users). */
  member?: Member | undefined;
  /** The caller's own real email address (POST /register with realm_user); own object only. */
  deliveryEmail?: string | undefined;
  /** The object is one of register's `cross_realm_bots`: a system bot (V5). */
  systemBot?: boolean | undefined;
  /** The user id of an email in the realm (a 2.1 bot's `bot_owner`). */
  idOfEmail?: ((email: string) => number | undefined) | undefined;
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
  /** What the change emulates, as named in server_settings' `zulip_compat_shim.emulated` (T2). */
  readonly feature: string;
  /** The fields it adds, in the order they are added. */
  readonly fields: readonly string[];
  readonly needs: readonly Need[];
  /**
   * Pure: a value for each of `fields` the object should have, given the object so far and the
   * lookups. A field left out is not added (bot fields on humans, V2).
   */
  fill(user: UserObject, found: Lookups): Partial<Record<string, Fill>>;
}
