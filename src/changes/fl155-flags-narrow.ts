import type { ApiChange, RequestParams } from './types.js';

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** One element of a narrow, in either of the forms Zulip reads (`{operator, operand, negated}` or `[operator, operand]`). */
interface Term {
  operator: string;
  operand: unknown;
  negated: boolean;
}

/** The narrow's terms, or undefined when it is not one Zulip would read (the upstream then words the error). */
function termsOf(narrow: string | null): Term[] | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(narrow ?? '[]');
  } catch {
    return undefined;
  }
  if (!Array.isArray(parsed)) return undefined;
  const terms: Term[] = [];
  for (const t of parsed) {
    if (Array.isArray(t) && typeof t[0] === 'string') terms.push({ operator: t[0], operand: t[1], negated: false });
    else if (isObject(t) && typeof t.operator === 'string')
      terms.push({ operator: t.operator, operand: t.operand, negated: t.negated === true });
    else return undefined;
  }
  return terms;
}

/** A numeric anchor (a message id), or undefined for `oldest`, `newest`, `first_unread`. */
function anchorId(anchor: string | null): number | undefined {
  return anchor !== null && /^[0-9]+$/.test(anchor.trim()) ? Number(anchor.trim()) : undefined;
}

/**
 * What the shim does for one POST /messages/flags/narrow on an upstream below 155, as the app's
 * own `_legacyMarkNarrowAsRead` did (zulip-flutter 898d9077 removed it): marking a whole
 * narrow read from its oldest message, one of the three legacy endpoints that do that in one
 * call; anything else, the narrow's batch fetched (GET /messages, the app's own anchor and batch
 * size) and its messages' flag set (POST /messages/flags).
 */
export type FlagsNarrowPlan =
  | { kind: 'legacy'; path: '/mark_all_as_read' | '/mark_stream_as_read' | '/mark_topic_as_read'; form: Record<string, string> }
  | {
      kind: 'batch';
      /** GET /messages' query, the request's own narrow and range. */
      query: Record<string, string>;
      /** The anchor message, to be left out of the batch (include_anchor=false, which a 5.x GET /messages ignores). */
      leaveOut?: number;
      op: string;
      flag: string;
    };

/** Pure: the plan for a POST /messages/flags/narrow whose parameters (narrow translated down) are `params`. */
export function planFlagsNarrow(params: RequestParams): FlagsNarrowPlan {
  const anchor = params.get('anchor') ?? '';
  const op = params.get('op') ?? '';
  const flag = params.get('flag') ?? '';
  const legacy = legacyPlan(params, anchor, op, flag);
  if (legacy) return legacy;
  const query: Record<string, string> = { apply_markdown: 'false', client_gravatar: 'true' };
  for (const name of ['anchor', 'num_before', 'num_after', 'narrow']) {
    const value = params.get(name);
    if (value !== null) query[name] = value;
  }
  const leaveOut = includeAnchor(params) ? undefined : anchorId(anchor);
  return { kind: 'batch', query, op, flag, ...(leaveOut === undefined ? {} : { leaveOut }) };
}

/**
 * A whole narrow marked as read from its oldest message, where an old endpoint does it in one
 * call: the whole feed, a channel, a topic (unread or not, nothing negated); undefined otherwise.
 */
function legacyPlan(params: RequestParams, anchor: string, op: string, flag: string): FlagsNarrowPlan | undefined {
  const terms = termsOf(params.get('narrow'));
  const fromOldest = anchor.trim() === 'oldest' && (params.get('num_before') ?? '0').trim() === '0';
  if (!terms || !fromOldest || op !== 'add' || flag !== 'read' || terms.some((t) => t.negated)) return undefined;
  const rest = terms.filter((t) => !(t.operator === 'is' && t.operand === 'unread'));
  const stream = rest.find((t) => t.operator === 'stream');
  const topic = rest.find((t) => t.operator === 'topic');
  const streamId = typeof stream?.operand === 'number' ? stream.operand : undefined;
  if (rest.length === 0) return { kind: 'legacy', path: '/mark_all_as_read', form: {} };
  if (streamId === undefined) return undefined;
  if (rest.length === 1) return { kind: 'legacy', path: '/mark_stream_as_read', form: { stream_id: String(streamId) } };
  if (rest.length === 2 && typeof topic?.operand === 'string') {
    return { kind: 'legacy', path: '/mark_topic_as_read', form: { stream_id: String(streamId), topic_name: topic.operand } };
  }
  return undefined;
}

/** `include_anchor` as Zulip reads it: true unless the JSON false. */
function includeAnchor(params: RequestParams): boolean {
  return (params.get('include_anchor') ?? 'true').trim() !== 'false';
}

/** The answer of POST /messages/flags/narrow (what the app's UpdateMessageFlagsForNarrowResult requires). */
export interface FlagsNarrowAnswer {
  result: 'success';
  msg: '';
  processed_count: number;
  updated_count: number;
  first_processed_id: number | null;
  last_processed_id: number | null;
  found_oldest: boolean;
  found_newest: boolean;
}

/**
 * Pure: the answer after a legacy endpoint marked the whole narrow read. It covers the narrow to
 * its newest message (so the app, which loops until found_newest, stops); the legacy endpoints
 * say neither how many messages they changed nor which, so the counts are 0 and the ids null
 * (the app shows a count only after a second batch, which there is none of).
 */
export function legacyAnswer(): FlagsNarrowAnswer {
  return {
    result: 'success',
    msg: '',
    processed_count: 0,
    updated_count: 0,
    first_processed_id: null,
    last_processed_id: null,
    found_oldest: true,
    found_newest: true,
  };
}

/** Pure: a batch's message ids from GET /messages' answer, the anchor left out where it is to be. */
export function batchIds(messages: Json, leaveOut: number | undefined): number[] {
  const list = Array.isArray(messages.messages) ? messages.messages : [];
  const ids = list.flatMap((m) => (isObject(m) && typeof m.id === 'number' ? [m.id] : []));
  return leaveOut === undefined ? ids : ids.filter((id) => id !== leaveOut);
}

/** Pure: the answer for a batch: the ids processed, those whose flag changed (POST /messages/flags' `messages`), and what GET /messages found. */
export function batchAnswer(ids: readonly number[], updated: unknown, messages: Json): FlagsNarrowAnswer {
  return {
    result: 'success',
    msg: '',
    processed_count: ids.length,
    updated_count: Array.isArray(updated) ? updated.length : 0,
    first_processed_id: ids[0] ?? null,
    last_processed_id: ids.at(-1) ?? null,
    found_oldest: messages.found_oldest === true,
    found_newest: messages.found_newest === true,
  };
}

/**
 * Pure but for `answer`: GET /messages' answer as `include_anchor=false` would have made it: the
 * anchor message left out and `found_anchor` false. A 5.x server ignores the parameter, and the
 * app relies on it (zulip-flutter f52ce7f2 removed its own dropping), or shows the anchor twice.
 */
export function withoutAnchor(anchor: number): (answer: Json) => boolean {
  return (answer) => {
    const list = answer.messages;
    if (!Array.isArray(list)) return false;
    const kept = list.filter((m) => !(isObject(m) && m.id === anchor));
    if (kept.length === list.length) return false;
    answer.messages = kept;
    answer.found_anchor = false;
    return true;
  };
}

/**
 * Feature level 155 (Zulip 6.0): POST /messages/flags/narrow, and `include_anchor` in GET
 * /messages. An older server has neither: the endpoint is emulated (app/flags-narrow.ts, by the
 * plan above), and the anchor GET /messages returns although the app asked it not to is left out.
 */
export const flagsNarrow: ApiChange = {
  featureLevel: 155,
  feature: 'update_message_flags_for_narrow',
  appEmulation: { endpoint: 'POST /messages/flags/narrow' },
  parameter: {
    endpoint: 'GET /messages',
    editFor(params) {
      const anchor = includeAnchor(params) ? undefined : anchorId(params.get('anchor'));
      return anchor === undefined ? undefined : withoutAnchor(anchor);
    },
  },
};
