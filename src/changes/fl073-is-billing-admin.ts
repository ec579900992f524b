import type { ApiChange } from './types.js';

/**
 * Feature level 73 (Zulip 5.0): `is_billing_admin`. Older servers have no billing
 * administrators, so the true value is false.
 *
 * Modern servers dropped the field again at feature level 363 (Zulip 10.0, replaced by the
 * `can_manage_billing_group` realm setting). The shim emulates a 9.x server (feature levels
 * 263–362), which still sends it, so it is added below 73 and kept as sent from 73 on (U1);
 * clients written for 10.0+ ignore it.
 */
export const isBillingAdmin: ApiChange = {
  featureLevel: 73,
  feature: 'user_is_billing_admin',
  user: {
    fields: ['is_billing_admin'],
    needs: [],
    fill: () => ({ is_billing_admin: { value: false, source: 'rule' } }),
  },
};
