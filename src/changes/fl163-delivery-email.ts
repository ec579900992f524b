import type { ApiChange, UserObject } from './types.js';

/**
 * A realm that hides email addresses gives each user the API email `user{id}@{fake domain}`
 * (Zulip's `get_display_email_address`); any other API email is the real address, since it is
 * public (bots always are). So the API email tells whether the caller could see the real one. Pure.
 */
export function emailIsPublic(user: UserObject): boolean {
  if (typeof user.email !== 'string') return false;
  if (user.is_bot === true) return true;
  return !user.email.toLowerCase().startsWith(`user${String(user.user_id)}@`);
}

/**
 * V2: whether this change gives another user's object `delivery_email: null`: the upstream did
 * not send one and the API email is not the real address. (Such an object may be the caller's
 * own, whose real address the caller always sees.) Pure.
 */
export function deliveryEmailHidden(user: UserObject): boolean {
  return !('delivery_email' in user) && !emailIsPublic(user);
}

/**
 * Feature level 163 (Zulip 7.0): `delivery_email` in every user object (V2), `null` where the
 * caller cannot see the real address. Before, it was sent only where the realm hid addresses
 * and the caller could see them (6.0 also sends the own user's).
 *
 * The own user (U2): from POST /register (`delivery_email` at the top level in every era), else
 * from the user list where the upstream showed it; if neither can be read, `email` stands in
 * (the same address whenever the realm shows addresses to everyone).
 * Other users (V2): the upstream did not send it, so the caller may not see a hidden address:
 * the API email where it is the real one (emailIsPublic), else `null`.
 */
export const deliveryEmail: ApiChange = {
  featureLevel: 163,
  feature: 'user_delivery_email',
  user: {
    fields: ['delivery_email'],
    needs: ['delivery_email'],
    fill(user, { subject = 'own', deliveryEmail: looked, member }) {
      if (subject === 'other') return { delivery_email: { value: emailIsPublic(user) ? user.email : null, source: 'rule' } };
      if (looked !== undefined) return { delivery_email: { value: looked, source: 'lookup' } };
      if (member?.delivery_email !== undefined) return { delivery_email: { value: member.delivery_email, source: 'lookup' } };
      return { delivery_email: { value: typeof user.email === 'string' ? user.email : '', source: 'fallback' } };
    },
  },
};
