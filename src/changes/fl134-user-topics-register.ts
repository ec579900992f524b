import type { ApiChange, QueueEventChange, QueueState } from './types.js';

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

/** The visibility policies of a topic neither muted nor anything else, and of a muted one (UserTopicVisibilityPolicy). */
const NONE = 0;
const MUTED = 1;

/** A muted topic by channel id: `[stream_id, topic, when muted]`. */
type MutedTopic = [number, string, number];

/** The muted topics of a `muted_topics` list (`[channel name, topic, timestamp]`) whose channel `ids` names, by id. */
function mutedByIds(list: unknown, ids: Readonly<Record<string, number>>): MutedTopic[] {
  if (!Array.isArray(list)) return [];
  return list.flatMap((entry): MutedTopic[] => {
    if (!Array.isArray(entry) || typeof entry[0] !== 'string' || typeof entry[1] !== 'string') return [];
    const id = Object.hasOwn(ids, entry[0]) ? ids[entry[0]] : undefined;
    return id === undefined ? [] : [[id, entry[1], typeof entry[2] === 'number' ? entry[2] : 0]];
  });
}

/** A `user_topic` event as a 6.0 server sends it, with the id of the event it stands for. */
function userTopicEvent(id: unknown, [streamId, topic, when]: MutedTopic, policy: number): Record<string, unknown> {
  return { type: 'user_topic', stream_id: streamId, topic_name: topic, last_updated: when, visibility_policy: policy, id };
}

/** What an event queue keeps: channel names to ids (kept current by channel events) and the muted topics last sent. */
interface MutedState extends QueueState {
  ids: Record<string, number>;
  muted: MutedTopic[];
}

const keyOf = ([streamId, topic]: MutedTopic) => `${streamId}\u0000${topic}`;

/** The channels an event names with their ids (stream create, subscription add), or a channel's new name (stream update). */
function learnChannels(event: Json, ids: Record<string, number>): boolean {
  if (event.type === 'stream' && event.op === 'update' && event.property === 'name' && typeof event.value === 'string') {
    for (const [name, id] of Object.entries(ids)) if (id === event.stream_id) delete ids[name];
    if (typeof event.stream_id === 'number') ids[event.value] = event.stream_id;
    return true;
  }
  const list =
    event.type === 'stream' && event.op === 'create'
      ? event.streams
      : event.type === 'subscription' && event.op === 'add'
        ? event.subscriptions
        : undefined;
  if (!Array.isArray(list)) return false;
  for (const s of list) if (isObject(s) && typeof s.name === 'string' && typeof s.stream_id === 'number') ids[s.name] = s.stream_id;
  return true;
}

/**
 * Below 134 a mute or unmute is one `muted_topics` event with the user's whole list (channel
 * names); from 134 it is a `user_topic` event per topic, which the app alone reads. Kept per
 * queue: the list last sent, by channel id (renames do not change it), and channel names to ids
 * from register and the channel events since. Each `muted_topics` event gains, before it, a
 * `user_topic` event per topic it unmutes (policy 0, now) and per topic it mutes (1, when muted).
 * A topic of a channel the queue never named is left out, as register leaves it out.
 */
export const mutedTopicsPerQueue: QueueEventChange = {
  name: 'muted_topics',
  markers: ['"stream"', '"subscription"'],
  start(answer) {
    if (!Array.isArray(answer.muted_topics)) return undefined;
    const ids = Object.fromEntries(channelIds(answer));
    return { ids, muted: mutedByIds(answer.muted_topics, ids) } satisfies MutedState;
  },
  up(event, state, now) {
    const kept = state as MutedState;
    if (event.type !== 'muted_topics') {
      learnChannels(event, kept.ids);
      return undefined;
    }
    const next = mutedByIds(event.muted_topics, kept.ids);
    const before = new Set(kept.muted.map(keyOf));
    const after = new Set(next.map(keyOf));
    const unmuted = kept.muted.filter((t) => !after.has(keyOf(t))).map((t) => userTopicEvent(event.id, [t[0], t[1], now], NONE));
    const muted = next.filter((t) => !before.has(keyOf(t))).map((t) => userTopicEvent(event.id, t, MUTED));
    kept.muted = next;
    return [...unmuted, ...muted, event];
  },
};

/**
 * Feature level 134 (Zulip 6.0): register's `user_topics` (`stream_id`, `topic_name`,
 * `last_updated`, `visibility_policy`), which replaced `muted_topics` (`[channel name, topic,
 * timestamp]`, every one muted), and the `user_topic` events that keep it current. The app's
 * parsers require `user_topics` (zulip-flutter 886245ff); it is built from the same answer's
 * `muted_topics`, channel names to ids from its channel lists (a topic of a channel the answer
 * does not name is left out: the app could not show it). The events are built per event queue
 * (mutedTopicsPerQueue, app/queue-state.ts).
 */
export const userTopicsRegister: ApiChange = {
  featureLevel: 134,
  feature: 'user_topics_register',
  register: {
    fields: [],
    edit(answer) {
      const muted = answer.muted_topics;
      if ('user_topics' in answer || !Array.isArray(muted)) return false;
      const ids = Object.fromEntries(channelIds(answer));
      answer.user_topics = mutedByIds(muted, ids).map(([streamId, topic, when]) => ({
        stream_id: streamId,
        topic_name: topic,
        last_updated: when,
        visibility_policy: MUTED,
      }));
      return true;
    },
  },
  answer: {
    messageFields: [],
    eventFields: { muted_topics: ['muted_topics'] },
    marker: '"muted_topics"',
    up: (value) => value,
    perQueue: mutedTopicsPerQueue,
  },
};
