import type { ApiChange } from './types.js';

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Channel names to ids, from every list of channels the register answer holds. */
function channelIds(answer: Json): Map<string, number> {
  const ids = new Map<string, number>();
  for (const key of ['subscriptions', 'unsubscribed', 'never_subscribed', 'streams']) {
    const list = answer[key];
    if (!Array.isArray(list)) continue;
    for (const s of list) {
      if (isObject(s) && typeof s.name === 'string' && typeof s.stream_id === 'number' && !ids.has(s.name)) ids.set(s.name, s.stream_id);
    }
  }
  return ids;
}

/** The visibility policy of a muted topic (UserTopicVisibilityPolicy.muted). */
const MUTED = 1;

/**
 * Feature level 134 (Zulip 6.0): register's `user_topics` (`stream_id`, `topic_name`,
 * `last_updated`, `visibility_policy`), which replaced `muted_topics` (`[channel name, topic,
 * timestamp]`, every one muted). The app's parsers require it (zulip-flutter 886245ff); it is
 * built from the same answer's `muted_topics`, channel names to ids from its channel lists (a
 * topic of a channel the answer does not name is left out: the app could not show it). The
 * events that keep it current below 134 are not built yet (docs/mobile-app.md §7(b)).
 */
export const userTopicsRegister: ApiChange = {
  featureLevel: 134,
  feature: 'user_topics_register',
  register: {
    fields: [],
    edit(answer) {
      const muted = answer.muted_topics;
      if ('user_topics' in answer || !Array.isArray(muted)) return;
      const ids = channelIds(answer);
      answer.user_topics = muted.flatMap((entry) => {
        if (!Array.isArray(entry) || typeof entry[0] !== 'string' || typeof entry[1] !== 'string') return [];
        const id = ids.get(entry[0]);
        if (id === undefined) return [];
        const when = typeof entry[2] === 'number' ? entry[2] : 0;
        return [{ stream_id: id, topic_name: entry[1], last_updated: when, visibility_policy: MUTED }];
      });
    },
  },
};
