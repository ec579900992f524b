import type { ApiChange } from './types.js';

/**
 * Feature level 125 (Zulip 6.0): the user setting `display_emoji_reaction_users`. An older
 * server shows reaction counts, never names: `false`, its behaviour, in register's
 * `user_settings` (which the app parses as a whole; zulip-flutter 13a2447d made the key required).
 */
export const emojiReactionUsers: ApiChange = {
  featureLevel: 125,
  feature: 'display_emoji_reaction_users',
  register: {
    fields: [],
    edit(answer) {
      const settings = answer.user_settings;
      if (typeof settings !== 'object' || settings === null || Array.isArray(settings)) return false;
      if ('display_emoji_reaction_users' in settings) return false;
      (settings as Record<string, unknown>).display_emoji_reaction_users = false;
      return true;
    },
  },
};
