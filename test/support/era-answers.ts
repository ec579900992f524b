import { readFileSync } from 'node:fs';
import { OPENAPI_ANSWERS_FILE, type EraAnswer, type OpenApiAnswers } from '../../scripts/openapi-answers.js';

/**
 * Whole answers of a Zulip server at a given feature level, from Zulip's OpenAPI description
 * (test/fixtures/openapi-answers.json, written by scripts/openapi-answers.ts): every documented
 * field, less those its "New in … (feature level N)" note puts after the level. The fake
 * upstream sends them for `whole: true`, beside what it models itself (users, presence).
 */

const ANSWERS = JSON.parse(readFileSync(OPENAPI_ANSWERS_FILE, 'utf8')) as OpenApiAnswers;

function asOf({ value, since }: EraAnswer, level: number): unknown {
  const copy = structuredClone(value);
  const newer = Object.entries(since)
    .filter(([pointer, at]) => pointer !== '' && at > level)
    .map(([pointer]) => pointer.split('/').slice(1))
    .sort((a, b) => b.length - a.length);
  for (const path of newer) {
    const parent = path
      .slice(0, -1)
      .reduce<unknown>((o, k) => (o && typeof o === 'object' ? (o as Record<string, unknown>)[k] : undefined), copy);
    if (parent && typeof parent === 'object' && !Array.isArray(parent)) delete (parent as Record<string, unknown>)[path.at(-1)!];
  }
  return copy;
}

export type EraAnswerName = keyof OpenApiAnswers['answers'];

/**
 * The flags of a message that @-mentioned everyone, as a server at `level` sends them: one
 * `wildcard_mentioned` before 224; from 224 the flag is split, and message objects (GET /messages,
 * `message` events) add the old name back for older clients while `update_message` events carry
 * the stored flags alone (Zulip's MessageDict and do_update_message).
 */
export function wildcardFlagsAt(level: number, inUpdateMessage = false): string[] {
  if (level < 224) return ['wildcard_mentioned'];
  return inUpdateMessage ? ['stream_wildcard_mentioned'] : ['stream_wildcard_mentioned', 'wildcard_mentioned'];
}

/**
 * The documented examples flag no message as @-mentioning everyone; the era's answers do, for one
 * message of GET /messages, the one of GET /messages/{id}, and the `message` and `update_message`
 * events, each with the flags as the era sends them.
 */
function withWildcardMention(name: string, value: Record<string, unknown>, level: number): Record<string, unknown> {
  const flagged = (m: unknown, update = false) => {
    const o = m as { flags?: string[] };
    o.flags = [...(o.flags ?? []), ...wildcardFlagsAt(level, update)];
  };
  if (name === 'messages') flagged((value.messages as unknown[])[0]);
  if (name === 'message') flagged(value.message);
  if (name === 'message_event') flagged(value);
  if (name === 'update_message_event') flagged(value, true);
  return value;
}

/** The answer a server at `level` gives, as documented. */
export function eraAnswer(name: EraAnswerName, level: number): Record<string, unknown> {
  return withWildcardMention(name, asOf(ANSWERS.answers[name], level) as Record<string, unknown>, level);
}

/** The `client_capabilities` of a register that change how events are sent. */
export interface Capabilities {
  /** `delete_message` carries `message_ids` (a list), else one `message_id`. */
  bulk_message_deletion?: boolean;
}

/** A documented event as the server sends it to a queue with `capabilities`. */
function forQueue(event: Record<string, unknown>, capabilities: Capabilities): Record<string, unknown> {
  if (event.type !== 'delete_message') return event;
  const { message_id, message_ids, ...rest } = event as { message_id?: number; message_ids?: number[] };
  const ids = message_ids ?? [message_id!];
  return capabilities.bulk_message_deletion ? { ...rest, message_ids: ids } : { ...rest, message_id: ids[0] };
}

/** Every event a server at `level` sends a queue registered with `capabilities`, as documented, ids from 0. */
export function eraEvents(level: number, capabilities: Capabilities = {}): Record<string, unknown>[] {
  return ANSWERS.events
    .filter((e) => (e.since[''] ?? 0) <= level)
    .map((e, i) => {
      const event = asOf(e, level) as Record<string, unknown>;
      return { ...forQueue(withWildcardMention(`${String(event.type)}_event`, event, level), capabilities), id: i };
    });
}
