import type { ApiChange } from './types.js';

/** Zulip 9.0 (feature level 248): `type: "channel"` for messages and typing notifications (before: `stream`). */
export const typeChannel: ApiChange = {
  featureLevel: 248,
  feature: 'type_channel',
  request: {
    endpoints: ['POST /messages', 'POST /typing'],
    apply: (params) => params.edit('type', (type) => (type === 'channel' ? 'stream' : type)),
  },
};
