import type { ApiChange } from './types.js';

/**
 * Feature level 204 (Zulip 8.0): register's typing periods. An older server has none to send;
 * its clients used the values Zulip's own apps had hard-coded, which Zulip's API documentation
 * names for older servers and which the app defaulted to until its server-7 sweep made the keys
 * required.
 */
export const typingPeriods: ApiChange = {
  featureLevel: 204,
  feature: 'typing_periods',
  register: {
    fields: [
      'server_typing_started_expiry_period_milliseconds',
      'server_typing_stopped_wait_period_milliseconds',
      'server_typing_started_wait_period_milliseconds',
    ],
    fill: () => ({
      server_typing_started_expiry_period_milliseconds: 15000,
      server_typing_stopped_wait_period_milliseconds: 5000,
      server_typing_started_wait_period_milliseconds: 10000,
    }),
  },
};
