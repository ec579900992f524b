import type { ApiChange } from './types.js';

/**
 * Feature level 8 (Zulip 3.0): `is_owner`. Older servers have no owner role, so nobody is one
 * (Zulip's API changelog, feature level 8).
 */
export const isOwner: ApiChange = {
  featureLevel: 8,
  feature: 'user_is_owner',
  user: {
    fields: ['is_owner'],
    needs: [],
    fill: () => ({ is_owner: { value: false, source: 'rule' } }),
  },
};
