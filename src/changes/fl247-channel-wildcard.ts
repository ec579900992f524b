import { editOutsideCode } from './markdown-text.js';
import type { ApiChange } from './types.js';

const CHANNEL_WILDCARD = /@(_?)\*\*channel\*\*/g;

/** `@**channel**` and silent `@_**channel**` as the older `@**stream**`, outside code. Pure. */
export function channelWildcardAsStream(content: string): string {
  return content.includes('**channel**') ? editOutsideCode(content, (text) => text.replace(CHANNEL_WILDCARD, '@$1**stream**')) : content;
}

/**
 * Feature level 247 (Zulip 9.0): the `@**channel**` wildcard mention. An older server leaves it
 * as text and notifies nobody; `@**stream**` is the same mention there. The app writes it in new
 * messages and edits. (The app names users in mentions with their id, `@**Name|id**`, so a bare
 * `@**channel**` from it is the wildcard.)
 */
export const channelWildcard: ApiChange = {
  featureLevel: 247,
  feature: 'channel_wildcard_mention',
  request: {
    endpoints: ['POST /messages', 'PATCH /messages/{id}'],
    apply(params) {
      const content = params.get('content');
      if (content === null) return false;
      const next = channelWildcardAsStream(content);
      if (next === content) return false;
      params.set('content', next);
      return true;
    },
  },
};
