import { hasLiveMention } from './content.js';
import type { ApiChange } from './types.js';

const OLD_FLAG = 'wildcard_mentioned';
const NEW_FLAG = 'stream_wildcard_mentioned';

/** A message's `flags` with the old wildcard flag under its new name (before 224 every wildcard was the channel's). */
export function wildcardFlagUp(flags: unknown): unknown {
  if (!Array.isArray(flags) || !flags.includes(OLD_FLAG)) return flags;
  return flags.map((flag) => (flag === OLD_FLAG ? NEW_FLAG : flag));
}

/** The error the app shows for a message with `@**topic**` to a server below 224 (M6). */
export const TOPIC_WILDCARD_REFUSAL = 'This server does not support @topic mentions; use @**all** or mention people';

/**
 * Feature level 224 (Zulip 8.0): the `@**topic**` wildcard mention, and the message flag
 * `wildcard_mentioned` split into `stream_wildcard_mentioned` and `topic_wildcard_mentioned`.
 * The app offers `@**topic**` at the level it is shown; an older server renders it as text and
 * notifies nobody, so a message holding a live one is refused with an error the app shows (M6)
 * rather than sent silently. The flag the app no longer knows is renamed in the messages and
 * events it receives.
 */
export const topicWildcard: ApiChange = {
  featureLevel: 224,
  feature: 'topic_wildcard_mention',
  content: {
    refusal: (content) => (hasLiveMention(content, 'topic') ? TOPIC_WILDCARD_REFUSAL : undefined),
  },
  answer: {
    messageFields: ['flags'],
    eventFields: { message: ['flags'], update_message: ['flags'] },
    marker: `"${OLD_FLAG}"`,
    up: wildcardFlagUp,
  },
};
