import type { ApiChange } from './types.js';

/**
 * Feature level 138 (Zulip 6.0): no limit on editing a message is `null`
 * (`realm_message_content_edit_limit_seconds`); before, it was `0`. The app at the level shown
 * reads 0 as "no time at all" (zulip-flutter ba9c636d removed its 0 branch).
 */
export const editLimitNone: ApiChange = {
  featureLevel: 138,
  feature: 'message_edit_limit_null',
  register: {
    fields: [],
    edit(answer) {
      if (answer.realm_message_content_edit_limit_seconds !== 0) return false;
      answer.realm_message_content_edit_limit_seconds = null;
      return true;
    },
  },
};
