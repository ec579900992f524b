import type { ApiChange } from './types.js';

/**
 * Feature level 164 (Zulip 7.0): register's presence intervals. An older server has none to send;
 * its clients used Zulip's hard-coded 60 and 140 seconds, as the server itself did. The register
 * handler adds them wherever it rewrites presence (W2); for the app, a register it does not fetch
 * presence in gets them too, since its parsers require them.
 */
export const presenceSettings: ApiChange = {
  featureLevel: 164,
  feature: 'presence_settings',
  register: {
    fields: ['server_presence_ping_interval_seconds', 'server_presence_offline_threshold_seconds'],
    fill: () => ({ server_presence_ping_interval_seconds: 60, server_presence_offline_threshold_seconds: 140 }),
  },
};
