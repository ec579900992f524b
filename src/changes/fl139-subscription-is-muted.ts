import type { ApiChange } from './types.js';

/**
 * Feature level 139 (Zulip 6.0): a subscription's `is_muted`, the inverse of `in_home_view`. From
 * 139 a change to either is sent as two `subscription update` events, one per property; before,
 * only `in_home_view`, which the app at the level shown ignores (an unknown property). For the
 * app, such an event says the same as `is_muted` with the value inverted.
 */
export const subscriptionIsMuted: ApiChange = {
  featureLevel: 139,
  feature: 'subscription_is_muted',
  answer: {
    messageFields: [],
    eventFields: { subscription: ['property', 'value'] },
    marker: '"in_home_view"',
    up: (value) => value,
    upEvent(event) {
      if (event.op !== 'update' || event.property !== 'in_home_view' || typeof event.value !== 'boolean') return false;
      event.property = 'is_muted';
      event.value = !event.value;
      return true;
    },
  },
};
