import type { ApiChange } from './types.js';

/** The client name under which an older server counts a message as sent by a person. */
const HUMAN_CLIENT_AGENT = 'ZulipMobile/flutter';

/**
 * Feature level 236 (Zulip 8.0): `read_by_sender`. Before it, the server marks a message read
 * for its sender only when the client is one it knows as a person's; the app names itself
 * `ZulipMobile/flutter` there (its lib/api/route/messages.dart), as here.
 */
export const readBySender: ApiChange = {
  featureLevel: 236,
  feature: 'read_by_sender',
  request: {
    endpoints: ['POST /messages'],
    apply(_params, headers) {
      if (headers['user-agent'] === HUMAN_CLIENT_AGENT) return false;
      headers['user-agent'] = HUMAN_CLIENT_AGENT;
      return true;
    },
  },
};
