import type { ApiChange } from './types.js';

/**
 * Feature level 137 (Zulip 6.0): read receipts and `realm_enable_read_receipts`. An older server
 * keeps none to show: `false`, with which the app hides them (listed as cannot).
 */
export const readReceipts: ApiChange = {
  featureLevel: 137,
  feature: 'read_receipts',
  register: {
    fields: ['realm_enable_read_receipts'],
    fill: () => ({ realm_enable_read_receipts: false }),
  },
};
