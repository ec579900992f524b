import type { ApiChange } from './types.js';

/**
 * Feature level 215 (Zulip 8.0): a typing notification for a channel names it by `stream_id`;
 * before, by `to`, a JSON list holding the one stream id.
 */
export const typingStreamId: ApiChange = {
  featureLevel: 215,
  feature: 'typing_stream_id',
  request: {
    endpoints: ['POST /typing'],
    apply(params) {
      const id = params.get('stream_id');
      if (id === null || params.has('to')) return false;
      params.delete('stream_id');
      params.append('to', JSON.stringify([Number(id)]));
      return true;
    },
  },
};
