import type { ApiChange } from './types.js';

/** Zulip 7.0 (feature level 174): `type: "direct"` for messages and typing notifications (before: `private`). */
export const typeDirect: ApiChange = {
  featureLevel: 174,
  feature: 'type_direct',
  request: {
    endpoints: ['POST /messages', 'POST /typing'],
    apply: (params) => params.edit('type', (type) => (type === 'direct' ? 'private' : type)),
  },
};
