import type { ApiChange } from './types.js';

/** Modern role values (U3). */
export const ROLE = { OWNER: 100, ADMIN: 200, MODERATOR: 300, MEMBER: 400, GUEST: 600 } as const;

/**
 * The role a server without `role` gave the user, from its flags (`is_owner`, `is_admin`, `is_guest`):
 * owner 100, else administrator 200, else guest 600, else member 400. Moderators (300) exist
 * only from feature level 60, where the upstream sends `role` itself.
 */
export function roleOf(user: { is_owner?: unknown; is_admin?: unknown; is_guest?: unknown }): number {
  if (user.is_owner === true) return ROLE.OWNER;
  if (user.is_admin === true) return ROLE.ADMIN;
  if (user.is_guest === true) return ROLE.GUEST;
  return ROLE.MEMBER;
}

/** Feature level 59 (Zulip 4.0): `role`, derived after is_owner and is_guest are known. */
export const role: ApiChange = {
  featureLevel: 59,
  feature: 'user_role',
  user: {
    fields: ['role'],
    needs: [],
    fill: (user) => ({ role: { value: roleOf(user), source: 'rule' } }),
  },
};
