import type { ApiChange } from './types.js';

/**
 * Feature level 257 (Zulip 9.0): push notification payloads carry `realm_url`, the new name of
 * `realm_uri` (which goes on being sent). The app's legacy notification parser reads `realm_url`
 * only, since its server-9 sweep; the value is the payload's own `realm_uri`.
 */
export const notificationRealmUrl: ApiChange = {
  featureLevel: 257,
  feature: 'notification_realm_url',
  notification: {
    fields: ['realm_url'],
    fill(payload) {
      const uri = payload.realm_uri;
      return typeof uri === 'string' ? { realm_url: { value: uri, source: 'rule' } } : {};
    },
  },
};
