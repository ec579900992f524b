import type { ProfileChange } from './types.js';

/**
 * Feature level 83 (Zulip 5.0): `is_cross_realm_bot` is called `is_system_bot`. The system
 * bots (Notification Bot, Welcome Bot, …) carry it as true; other users do not carry it.
 */
export const isSystemBot: ProfileChange = {
  featureLevel: 83,
  feature: 'user_is_system_bot',
  fields: ['is_system_bot'],
  needs: [],
  fill: (user) => (user.is_cross_realm_bot === true ? { is_system_bot: { value: true, source: 'rule' } } : {}),
};
