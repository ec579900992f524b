import { narrowLinkEdits } from './content.js';
import { editNarrow, NARROWED, operatorOf, withOperator } from './narrow.js';
import type { ApiChange } from './types.js';

const RENAMED: Readonly<Record<string, string>> = { channel: 'stream', channels: 'streams' };

/**
 * Feature level 250 (Zulip 9.0): the narrow operators `channel` and `channels` (before: `stream`,
 * `streams`), in narrows and in the narrow links the app writes into messages (M6), which an
 * older server's web app opens only as `#narrow/stream/…`.
 */
export const channelOperator: ApiChange = {
  featureLevel: 250,
  feature: 'narrow_channel_operator',
  request: {
    endpoints: NARROWED,
    apply: (params) =>
      editNarrow(params, (narrow) =>
        narrow.map((element) => {
          const old = RENAMED[String(operatorOf(element))];
          return old === undefined ? element : withOperator(element, old);
        }),
      ),
  },
  content: {
    edits: (content, site) => narrowLinkEdits(content, site, RENAMED),
  },
};
