import type { ApiChange } from './types.js';

/**
 * Feature level 1 (Zulip 3.0): `GET /users/{user_id}`. An older server has no such endpoint; the
 * shim answers it from the realm's user list (profile/users-handler.ts), filled as every user
 * object is.
 */
export const getUserById = {
  featureLevel: 1,
  feature: 'get_user_by_id',
  emulation: { by: 'profile/users-handler.ts' },
} as const satisfies ApiChange;
