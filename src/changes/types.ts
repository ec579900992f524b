import type { Member } from '../upstream/user-directory.js';

/**
 * The vocabulary of the API changes the shim bridges (U2, V1, M2). Each change names the feature
 * level that brought it and, per direction, one pure transform: user objects filled in for every
 * caller (the own profile, GET /users, GET /users/{id|email}, register's user lists), and the
 * mobile app's requests put back into an older upstream's form.
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

/** A change's part in user objects (U2, V1): applied to every caller's, below its level. */
export interface UserChange {
  /** The fields it adds, in the order they are added. */
  readonly fields: readonly string[];
  readonly needs: readonly Need[];
  /**
   * Pure: a value for each of `fields` the object should have, given the object so far and the
   * lookups. A field left out is not added (bot fields on humans, V2).
   */
  fill(user: UserObject, found: Lookups): Partial<Record<string, Fill>>;
}

/**
 * A change's part in requests (M2): what a client shown a higher level sends, put back into the
 * form an upstream below the level knows. Applied only to the mobile app's requests (M1).
 */
export interface RequestChange {
  /** `METHOD /path` after the API prefix; `{id}` stands for one path segment of digits. */
  readonly endpoints: readonly string[];
  /**
   * Pure but for its arguments: changes the form or query parameters (and headers) in place;
   * true when anything changed.
   */
  apply(params: URLSearchParams, headers: Record<string, string>): boolean;
}

/**
 * A legacy push notification's payload (M7) as the app reads it: the server's `gcm_payload`, or
 * the `zulip` object of its `apns_payload.custom`. Flat: every value a string, a number or a list.
 */
export type NotificationPayload = Readonly<Record<string, unknown>>;

/** What the push relay knows of a notification's realm beyond the payload itself. */
export interface NotificationRealm {
  /** The realm's name, from its server_settings; undefined when they could not be had. */
  name?: string | undefined;
}

/**
 * A change's part in push notifications (M7): a field the app requires in a legacy payload that
 * a server below the level does not send. Applied by the push relay to every payload of a
 * notification from such a server.
 */
export interface NotificationChange {
  /** The payload fields it adds. */
  readonly fields: readonly string[];
  /** Pure: a value for each of `fields` the payload lacks; a field left out is not added. */
  fill(payload: NotificationPayload, realm: NotificationRealm): Partial<Record<string, Fill>>;
}

/**
 * One entry of Zulip's API changelog the shim bridges (U2, V1, M2): the feature level that
 * brought it, and what it means for each direction the shim translates. The one registry is
 * changes/index.ts.
 */
export interface ApiChange {
  /** The feature level that brought the change: it applies to upstreams below it. */
  readonly featureLevel: number;
  /** What the change emulates, as named in server_settings' `zulip_compat_shim.emulated` (T2) for user objects. */
  readonly feature: string;
  readonly user?: UserChange;
  readonly request?: RequestChange;
  readonly notification?: NotificationChange;
}

/** A change with a part in user objects. */
export type UserObjectChange = ApiChange & { readonly user: UserChange };
