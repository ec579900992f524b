import type { ApiChange, NotificationPayload } from './types.js';

/**
 * The host of the payload's own realm URL: the name of last resort when the realm's
 * server_settings could not be had (the app shows the name it stored at login before this one).
 */
function hostOf(payload: NotificationPayload): string | undefined {
  const url = payload.realm_url ?? payload.realm_uri;
  if (typeof url !== 'string') return undefined;
  try {
    return new URL(url).host || undefined;
  } catch {
    return undefined;
  }
}

/**
 * Feature level 234 (Zulip 8.0): push notification payloads carry `realm_name`, which the app's
 * legacy notification parser requires (zulip-flutter `LegacyFcmMessageWithIdentity`). The value is
 * the realm's name as its server_settings say; where they cannot be had, the host of the realm's
 * URL, and the answer says so (`fallback`).
 */
export const notificationRealmName: ApiChange = {
  featureLevel: 234,
  feature: 'notification_realm_name',
  notification: {
    fields: ['realm_name'],
    fill(payload, realm) {
      if (realm.name !== undefined) return { realm_name: { value: realm.name, source: 'lookup' } };
      const host = hostOf(payload);
      return host === undefined ? {} : { realm_name: { value: host, source: 'fallback' } };
    },
  },
};
