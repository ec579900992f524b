import { narrowLinkEdits } from './content.js';
import { editNarrow, NARROWED, operatorOf } from './narrow.js';
import type { ApiChange } from './types.js';

/**
 * Feature level 271 (Zulip 9.0): the `with` operator (a message's conversation, followed when the
 * message moves). Left out of narrows, as the app itself leaves it out for such a server: the
 * rest of the narrow says the conversation. In the links the app writes into messages (M6),
 * `/with/N` becomes `/near/N`, which an older web app opens at the same message.
 */
export const withOperatorChange: ApiChange = {
  featureLevel: 271,
  feature: 'narrow_with_operator',
  request: {
    endpoints: NARROWED,
    apply: (params) => editNarrow(params, (narrow) => narrow.filter((element) => operatorOf(element) !== 'with')),
  },
  content: {
    edits: (content, site) => narrowLinkEdits(content, site, { with: 'near' }),
  },
};
