import type { Fill, ApiChange } from './types.js';

/**
 * Feature level 1 (Zulip 3.0): bots carry `bot_owner_id` instead of `bot_owner`, the owner's
 * email, and from 3.0 every bot object has `bot_type` and `bot_owner_id` (V5). 2.1 lacks them
 * where it builds its objects by hand: a bot's own GET /users/me, and register's
 * `cross_realm_bots` (the system bots, `get_cross_realm_dicts`). They come from the object's
 * own `bot_owner`, else the realm's user list (`member`), else, for a system bot, the rule
 * (a default bot without an owner, as the modern server says). An owner's email becomes an id
 * through the realm's user list; `null` where the bot has no owner. Bots only (V2).
 */
export const botOwnerId: ApiChange = {
  featureLevel: 1,
  feature: 'user_bot_owner_id',
  user: {
    fields: ['bot_owner_id', 'bot_type'],
    needs: ['member'],
    fill(user, { idOfEmail, member, systemBot }) {
      if (user.is_bot !== true) return {};
      const out: Partial<Record<string, Fill>> = {};
      if ('bot_owner' in user) out.bot_owner_id = ownerId(user.bot_owner, idOfEmail, 'rule');
      else if (systemBot) out.bot_owner_id = { value: null, source: 'rule' };
      else if (member?.bot_owner_id !== undefined) out.bot_owner_id = { value: member.bot_owner_id, source: 'lookup' };
      else if (member?.bot_owner !== undefined) out.bot_owner_id = ownerId(member.bot_owner, idOfEmail, 'lookup');
      if (systemBot) out.bot_type = { value: DEFAULT_BOT, source: 'rule' };
      else if (member?.bot_type !== undefined) out.bot_type = { value: member.bot_type, source: 'lookup' };
      return out;
    },
  },
};

/** `UserProfile.DEFAULT_BOT`: the system bots' type. */
const DEFAULT_BOT = 1;

function ownerId(owner: unknown, idOfEmail: ((email: string) => number | undefined) | undefined, found: 'rule' | 'lookup'): Fill {
  if (typeof owner !== 'string' || owner === '') return { value: null, source: found };
  const id = idOfEmail?.(owner);
  return id !== undefined ? { value: id, source: 'lookup' } : { value: null, source: 'fallback' };
}
