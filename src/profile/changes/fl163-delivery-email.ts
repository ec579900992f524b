import type { ProfileChange } from './types.js';

/**
 * Feature level 163 (Zulip 7.0): `delivery_email` always in the own user. From 6.0 the own user
 * already carries it; before, only admins of realms that hide emails got it. The true value
 * comes from POST /register (`delivery_email` at the top level in every era), else from the
 * user list where the upstream showed it. If neither can be read, `email` stands in: they are
 * the same address whenever the realm shows email addresses to everyone.
 */
export const deliveryEmail: ProfileChange = {
  featureLevel: 163,
  fields: ['delivery_email'],
  needs: ['delivery_email'],
  fill(user, { deliveryEmail: looked, member }) {
    if (looked !== undefined) return { delivery_email: { value: looked, source: 'lookup' } };
    if (member?.delivery_email !== undefined) return { delivery_email: { value: member.delivery_email, source: 'lookup' } };
    return { delivery_email: { value: typeof user.email === 'string' ? user.email : '', source: 'fallback' } };
  },
};
