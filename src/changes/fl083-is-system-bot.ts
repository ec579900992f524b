import type { ApiChange } from './types.js';

/**
 * Feature level 83 (Zulip 5.0): `is_cross_realm_bot` is called `is_system_bot`. The system
 * bots (Notification Bot, Welcome Bot, …) carry it as true; other users do not carry it.
 */
export const isSystemBot: ApiChange = {
  featureLevel: 83,
  feature: 'user_is_system_bot',
  user: {
    fields: ['is_system_bot'],
    needs: [],
    // 2.1's cross_realm_bots carry neither name: they are the system bots by where they are (V5).
    fill: (user, { systemBot }) =>
      user.is_cross_realm_bot === true || (systemBot && user.is_bot === true) ? { is_system_bot: { value: true, source: 'rule' } } : {},
  },
};
