import { mentionEdits } from './content.js';
import type { ApiChange } from './types.js';

/**
 * Feature level 247 (Zulip 9.0): the `@**channel**` wildcard mention. An older server leaves it
 * as text and notifies nobody; `@**stream**` is the same mention there. The app writes it in new
 * messages and edits. (The app names users in mentions with their id, `@**Name|id**`, so a bare
 * `@**channel**` from it is the wildcard.)
 */
export const channelWildcard: ApiChange = {
  featureLevel: 247,
  feature: 'channel_wildcard_mention',
  content: {
    edits: (content) => mentionEdits(content, 'channel', 'stream'),
  },
};
