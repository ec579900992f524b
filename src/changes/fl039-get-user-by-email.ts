import type { ApiChange } from './types.js';

/**
 * Feature level 39 (Zulip 4.0): `GET /users/{email}`. An older server has no such endpoint; the
 * shim answers it from the realm's user list (profile/users-handler.ts), filled as every user
 * object is.
 */
export const getUserByEmail = {
  featureLevel: 39,
  feature: 'get_user_by_email',
  emulation: { by: 'profile/users-handler.ts' },
} as const satisfies ApiChange;
