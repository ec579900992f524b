import type { ApiChange } from './types.js';

/** The old endpoint's `op` for each visibility policy it can express: none (0) and muted (1). */
const OP_OF_POLICY: Readonly<Record<string, string>> = { '0': 'remove', '1': 'add' };

/** The error the app shows for unmuting or following a topic on a server below 170. */
export const USER_TOPIC_POLICY_REFUSAL = 'This server can only mute and unmute topics (following a topic needs Zulip 7.0 or later)';

/**
 * Feature level 170 (Zulip 7.0): POST /user_topics, with visibility policies (none 0, muted 1,
 * unmuted 2, followed 3). An older server has PATCH /users/me/subscriptions/muted_topics
 * (`stream_id`, `topic`, `op` add or remove), which the app itself used below 170
 * (updateUserTopicCompat, removed in zulip-flutter 82515c38). Unmuted and followed have no
 * older form: refused with a Zulip error the app shows.
 */
export const userTopics: ApiChange = {
  featureLevel: 170,
  feature: 'user_topics_endpoint',
  endpoint: {
    from: 'POST /user_topics',
    to: { method: 'PATCH', path: '/users/me/subscriptions/muted_topics' },
    apply(params) {
      const policy = params.get('visibility_policy');
      if (policy === null) return undefined; // the upstream words the missing parameter
      const op = OP_OF_POLICY[policy.trim()];
      if (op === undefined) return USER_TOPIC_POLICY_REFUSAL;
      params.delete('visibility_policy');
      params.append('op', op);
      return undefined;
    },
  },
};
