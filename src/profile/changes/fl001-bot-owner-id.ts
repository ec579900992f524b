import type { ProfileChange } from './types.js';

/**
 * Feature level 1 (Zulip 3.0): bots carry `bot_owner_id` instead of `bot_owner`, the owner's
 * email. A 2.1 bot row names its owner by email, which the realm's user list turns into an id;
 * `null` where the bot has no owner (legacy and system bots), as the modern server says.
 * Only bot rows that carry `bot_owner` get it (V2: bot fields only for bots).
 */
export const botOwnerId: ProfileChange = {
  featureLevel: 1,
  feature: 'user_bot_owner_id',
  fields: ['bot_owner_id'],
  needs: [],
  fill(user, { idOfEmail }) {
    if (user.is_bot !== true || !('bot_owner' in user)) return {};
    const owner = user.bot_owner;
    if (typeof owner !== 'string' || owner === '') return { bot_owner_id: { value: null, source: 'rule' } };
    const id = idOfEmail?.(owner);
    return { bot_owner_id: id !== undefined ? { value: id, source: 'lookup' } : { value: null, source: 'fallback' } };
  },
};
