import type { ApiChange } from './types.js';

/** The policy 133 removed (channel administrators) and the one Zulip's migration gave realms that had it (administrators). */
const REMOVED = 4;
const MIGRATED_TO = 5;

/**
 * Feature level 133 (Zulip 6.0): `realm_wildcard_mention_policy` 4 (channel administrators) was
 * removed; Zulip's migration moved realms with it to 5 (administrators). The app's enum has no
 * 4 and no fallback, so a register with it would fail to parse; 5 is what the realm became on upgrade.
 */
export const wildcardMentionPolicy: ApiChange = {
  featureLevel: 133,
  feature: 'wildcard_mention_policy_without_stream_admins',
  register: {
    fields: [],
    edit(answer) {
      if (answer.realm_wildcard_mention_policy !== REMOVED) return false;
      answer.realm_wildcard_mention_policy = MIGRATED_TO;
      return true;
    },
  },
};
