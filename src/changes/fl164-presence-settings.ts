import type { ApiChange } from './types.js';

/** W2: what servers before 7.0 behave with (their clients hard-coded it). */
export const OLD_SERVER_PRESENCE_SETTINGS = {
  server_presence_ping_interval_seconds: 60,
  server_presence_offline_threshold_seconds: 140,
} as const;

/**
 * Feature level 164 (Zulip 7.0): register's presence intervals. An older server has none to send;
 * its clients used Zulip's hard-coded 60 and 140 seconds, as the server itself did. One change for
 * every client: the register handler adds its fill wherever it rewrites presence (W2); for the
 * app, a register it does not fetch presence in gets them too (app-parts.ts), since its parsers
 * require them.
 */
export const presenceSettings = {
  featureLevel: 164,
  feature: 'presence_settings',
  register: {
    fields: Object.keys(OLD_SERVER_PRESENCE_SETTINGS),
    fill: () => ({ ...OLD_SERVER_PRESENCE_SETTINGS }),
  },
} satisfies ApiChange;
