/**
 * M2, requests down: the changes between Zulip 7.0 and feature level 277 the app's requests
 * depend on (docs/mobile-app.md, section 3), each undone for an upstream below the level that
 * brought it, as the app itself does for such a server. Pure: form or query parameters (and
 * headers) in, changed in place; true when anything changed.
 */

interface RequestChange {
  featureLevel: number;
  /** `METHOD /path` after the API prefix. */
  endpoints: readonly string[];
  apply(params: URLSearchParams, headers: Record<string, string>): boolean;
}

/** A narrow element as the app sends it (`{"operator":…,"operand":…}`; older clients send pairs). */
type NarrowElement = { operator?: unknown; operand?: unknown; negated?: unknown } | unknown[];

function editNarrow(params: URLSearchParams, edit: (narrow: NarrowElement[]) => NarrowElement[]): boolean {
  const text = params.get('narrow');
  if (text === null) return false;
  let narrow: unknown;
  try {
    narrow = JSON.parse(text);
  } catch {
    return false; // the upstream words the error
  }
  if (!Array.isArray(narrow)) return false;
  const next = edit(narrow as NarrowElement[]);
  const out = JSON.stringify(next);
  if (out === JSON.stringify(narrow)) return false;
  params.set('narrow', out);
  return true;
}

const operatorOf = (e: NarrowElement) => (Array.isArray(e) ? e[0] : e.operator);
function withOperator(e: NarrowElement, operator: string): NarrowElement {
  return Array.isArray(e) ? [operator, ...e.slice(1)] : { ...e, operator };
}

const NARROWED = ['GET /messages', 'POST /messages/flags/narrow'];

export const REQUEST_CHANGES: readonly RequestChange[] = [
  {
    // Feature level 215: typing notifications for a channel name it by `stream_id`; before, by
    // `to`, a JSON list holding the one stream id.
    featureLevel: 215,
    endpoints: ['POST /typing'],
    apply(params) {
      const id = params.get('stream_id');
      if (id === null || params.has('to')) return false;
      params.delete('stream_id');
      params.set('to', JSON.stringify([Number(id)]));
      return true;
    },
  },
  {
    // Feature level 236: `read_by_sender`. Before it, the server marks a message read for its
    // sender only when the client is one it knows as a person's; the app names itself
    // `ZulipMobile/flutter` there (messages.dart), as here.
    featureLevel: 236,
    endpoints: ['POST /messages'],
    apply(_params, headers) {
      if (headers['user-agent'] === 'ZulipMobile/flutter') return false;
      headers['user-agent'] = 'ZulipMobile/flutter';
      return true;
    },
  },
  {
    // Zulip 9.0 (feature level 248): `type: "channel"` for messages and typing notifications.
    featureLevel: 248,
    endpoints: ['POST /messages', 'POST /typing'],
    apply(params) {
      if (params.get('type') !== 'channel') return false;
      params.set('type', 'stream');
      return true;
    },
  },
  {
    // Feature level 250: the narrow operators `channel` and `channels` (before: `stream`, `streams`).
    featureLevel: 250,
    endpoints: NARROWED,
    apply: (params) =>
      editNarrow(params, (narrow) =>
        narrow.map((e) => {
          const op = operatorOf(e);
          return op === 'channel' ? withOperator(e, 'stream') : op === 'channels' ? withOperator(e, 'streams') : e;
        }),
      ),
  },
  {
    // Feature level 271: the `with` operator (a message's conversation, following it when moved).
    // Left out, as the app leaves it out for such a server: the rest of the narrow says the conversation.
    featureLevel: 271,
    endpoints: NARROWED,
    apply: (params) => editNarrow(params, (narrow) => narrow.filter((e) => operatorOf(e) !== 'with')),
  },
];

/** The endpoints any change applies to (`METHOD /path` after the prefix). */
export const TRANSLATED_ENDPOINTS: ReadonlySet<string> = new Set(REQUEST_CHANGES.flatMap((c) => c.endpoints));

/** Applies every change the upstream's real level lacks; true when the parameters or headers changed. */
export function translateRequest(endpoint: string, params: URLSearchParams, real: number, headers: Record<string, string> = {}): boolean {
  let changed = false;
  for (const c of REQUEST_CHANGES) {
    if (real < c.featureLevel && c.endpoints.includes(endpoint) && c.apply(params, headers)) changed = true;
  }
  return changed;
}
