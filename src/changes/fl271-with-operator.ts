import { editNarrow, NARROWED, operatorOf } from './narrow.js';
import type { ApiChange } from './types.js';

/**
 * Feature level 271 (Zulip 9.0): the `with` operator (a message's conversation, followed when the
 * message moves). Left out, as the app itself leaves it out for such a server: the rest of the
 * narrow says the conversation.
 */
export const withOperatorChange: ApiChange = {
  featureLevel: 271,
  feature: 'narrow_with_operator',
  request: {
    endpoints: NARROWED,
    apply: (params) => editNarrow(params, (narrow) => narrow.filter((element) => operatorOf(element) !== 'with')),
  },
};
