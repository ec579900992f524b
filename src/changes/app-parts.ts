import { CHANGES, changeIdsOf } from './index.js';
import { proseRanges } from './markdown-text.js';
import type {
  AnswerChange,
  ApiChange,
  Content,
  EndpointChange,
  LookupChange,
  RequestParams,
  Site,
  StaticDataChange,
  TextEdit,
} from './types.js';

/**
 * M2, M6: the mobile app's parts of the API changes (changes/index.ts), applied between an
 * upstream at its real level and the level the app is shown (M1 decides whose requests): its
 * requests and message content down, register answers, messages and events up. Pure.
 */

/** The changes an app shown `shown` needs in front of an upstream at `real`: real < level ≤ shown. */
function between(real: number, shown: number): ApiChange[] {
  return CHANGES.filter((c) => real < c.featureLevel && c.featureLevel <= shown);
}

/** `METHOD /path` after the API prefix, a path segment of digits written `{id}`: how changes name endpoints. */
export function endpointKey(method: string, rest: string): string {
  return `${method} ${rest.replace(/\/[0-9]+(?=\/|$)/g, '/{id}')}`;
}

/** The requests whose `content` is a message's Markdown, which the content changes read (M6). */
const CONTENT_ENDPOINTS: readonly string[] = ['POST /messages', 'PATCH /messages/{id}'];

/**
 * Zulip's longest message, in characters (its MAX_MESSAGE_LENGTH; the app keeps to the realm's
 * `max_message_length`, which is it): a longer content is passed on untouched, for the upstream
 * to deal with as it does, and never costs the shim a scan.
 */
export const MAX_MESSAGE_LENGTH = 10_000;

/** Where the answers that carry messages hold them: a list of messages, one message, a list of events. */
const ANSWER_ENDPOINTS = {
  'GET /messages': 'messages',
  'GET /messages/{id}': 'message',
  'GET /events': 'events',
} as const satisfies Record<string, string>;
type AnswerEndpoint = keyof typeof ANSWER_ENDPOINTS;

const isAnswerEndpoint = (endpoint: string): endpoint is AnswerEndpoint => Object.hasOwn(ANSWER_ENDPOINTS, endpoint);

/** The key of an answer to `endpoint` that holds a list of messages or events, the part that grows (none for one message). */
export function answerListOf(endpoint: string): 'messages' | 'events' | undefined {
  const key = isAnswerEndpoint(endpoint) ? ANSWER_ENDPOINTS[endpoint] : undefined;
  return key === 'message' ? undefined : key;
}

/** The endpoints some change of the app's applies to: the app's requests to them are translated (see endpointKey). */
export const TRANSLATED_ENDPOINTS: ReadonlySet<string> = new Set(
  CHANGES.flatMap((c) => [
    ...(c.request?.endpoints ?? []),
    ...(c.content ? CONTENT_ENDPOINTS : []),
    ...(c.answer ? Object.keys(ANSWER_ENDPOINTS) : []),
    ...(c.endpoint ? [c.endpoint.from] : []),
    ...(c.lookup ? [c.lookup.endpoint] : []),
    ...(c.parameter ? [c.parameter.endpoint] : []),
    ...(c.appEmulation ? [c.appEmulation.endpoint] : []),
  ]),
);

/** What translating a request did: whether anything changed, or why it cannot be sent (M6). */
export interface Translated {
  changed: boolean;
  /** A Zulip-shaped 400's `msg`: the request must not reach an upstream that would not honour it. */
  refusal?: string;
  /** The endpoint the upstream takes the request at instead (EndpointChange), when not the one called. */
  to?: EndpointChange['to'];
  /** The ids of the changes that changed the request or refused it, in order. */
  applied: string[];
}

/** Whether `text` is longer than MAX_MESSAGE_LENGTH characters (code points, as Zulip counts). */
function tooLong(text: string): boolean {
  if (text.length <= MAX_MESSAGE_LENGTH) return false;
  if (text.length > 2 * MAX_MESSAGE_LENGTH) return true;
  let points = 0;
  for (const _ of text) if (++points > MAX_MESSAGE_LENGTH) return true;
  return false;
}

/**
 * The content changes' edits of one message, in order; an edit overlapping an earlier one is left
 * out. The ids of the changes whose edits are kept go into `applied`.
 */
function contentEdits(changes: readonly ApiChange[], content: Content, site: Site, applied: string[]): TextEdit[] {
  const edits = changes
    .flatMap((c) => (c.content?.edits?.(content, site) ?? []).map((edit) => ({ edit, id: c.feature })))
    .sort((a, b) => a.edit.start - b.edit.start);
  const kept = edits.filter((e, i) => i === 0 || e.edit.start >= edits[i - 1]!.edit.end);
  for (const { id } of kept) if (!applied.includes(id)) applied.push(id);
  return kept.map((e) => e.edit);
}

/**
 * M2, M6, requests down: applies every change between an upstream at `real` and the level `shown`
 * to a request to `endpoint` (see endpointKey), in feature-level order: its parameters (and
 * headers), then the `content` the server reads (the last, as Django's QueryDict) as a message's
 * Markdown. A client shown a lower level writes the older form itself. A refusal means the
 * request must not be sent.
 */
export function translateRequest(
  endpoint: string,
  params: RequestParams,
  real: number,
  shown: number,
  headers: Record<string, string> = {},
  site: Site = {},
): Translated {
  const changes = between(real, shown);
  const applied: string[] = [];
  for (const { request, feature } of changes) {
    if (request?.endpoints.includes(endpoint) && request.apply(params, headers)) applied.push(feature);
  }
  const changed = applied.length > 0;
  const moved = changes.find((c) => c.endpoint?.from === endpoint);
  if (moved?.endpoint) {
    applied.push(moved.feature);
    const refusal = moved.endpoint.apply(params);
    return refusal === undefined ? { changed: true, to: moved.endpoint.to, applied } : { changed, refusal, applied };
  }
  const content = CONTENT_ENDPOINTS.includes(endpoint) ? params.get('content') : null;
  if (content === null || tooLong(content) || !changes.some((c) => c.content)) return { changed, applied };
  const read: Content = { text: content, prose: proseRanges(content) };
  for (const c of changes) {
    const refusal = c.content?.refusal?.(read);
    if (refusal !== undefined) return { changed, refusal, applied: [...applied, c.feature] };
  }
  const kept: string[] = [];
  const edited = params.editText('content', () => contentEdits(changes, read, site, kept));
  return { changed: changed || edited, applied: edited ? [...applied, ...kept] : applied };
}

/** M2, register answers up: the keys the app's level has and an upstream at `real` does not send, with their values. */
export function registerAdditions(real: number, shown: number): Record<string, unknown> {
  return Object.assign({}, ...between(real, shown).map((c) => c.register?.fill?.() ?? {}));
}

/**
 * M2, register answers up: what an upstream at `real` sends in an older form, rewritten in place
 * for the level `shown`; the ids of the changes that changed it.
 */
export function editRegister(answer: Record<string, unknown>, real: number, shown: number): string[] {
  return between(real, shown).flatMap((c) => (c.register?.edit?.(answer) ? [c.feature] : []));
}

/** The lookups between `real` and `shown` that add to `endpoint`'s success answers. */
export function lookupsFor(endpoint: string, real: number, shown: number): LookupChange[] {
  return between(real, shown).flatMap((c) => (c.lookup?.endpoint === endpoint ? [c.lookup] : []));
}

/** The answer changes between `real` and `shown` that touch `endpoint`'s answers (none for other endpoints). */
export function answerChangesFor(endpoint: string, real: number, shown: number): AnswerChange[] {
  if (!isAnswerEndpoint(endpoint)) return [];
  return between(real, shown).flatMap((c) => (c.answer ? [c.answer] : []));
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Rewrites the declared `fields` of `object` through `change`; true when one changed. */
function upFields(object: unknown, fields: readonly string[] | undefined, change: AnswerChange): boolean {
  if (!fields || !isObject(object)) return false;
  let changed = false;
  for (const field of fields) {
    if (!(field in object)) continue;
    const next = change.up(object[field]);
    if (next === object[field]) continue;
    object[field] = next;
    changed = true;
  }
  return changed;
}

/** The fields of `event` that `change` declares for its type. */
function eventFieldsOf(change: AnswerChange, event: unknown): readonly string[] | undefined {
  const type = isObject(event) ? event.type : undefined;
  return typeof type === 'string' && Object.hasOwn(change.eventFields, type) ? change.eventFields[type] : undefined;
}

/**
 * M2, answers and events up: the messages (GET /messages, GET /messages/{id}) and events
 * (GET /events, by each event's type) of a parsed success `answer` to `endpoint`, rewritten in
 * place by `changes` (answerChangesFor), each only in the fields it declares; true when one
 * changed. The ids of the changes that changed it go into `applied`.
 */
export function translateAnswer(endpoint: string, answer: Json, changes: readonly AnswerChange[], applied: string[] = []): boolean {
  if (!isAnswerEndpoint(endpoint)) return false;
  const key = ANSWER_ENDPOINTS[endpoint];
  const held = answer[key];
  const items = key === 'message' ? [held] : Array.isArray(held) ? held : [];
  let changed = false;
  for (const change of changes) {
    let changedHere = false;
    for (const item of items) {
      const fields = key === 'events' ? eventFieldsOf(change, item) : change.messageFields;
      if (key === 'events' && fields && change.upEvent && isObject(item)) {
        if (change.upEvent(item)) changedHere = true;
      } else if (upFields(item, fields, change)) changedHere = true;
    }
    if (!changedHere) continue;
    changed = true;
    applied.push(...changeIdsOf([change]));
  }
  return changed;
}

/** The paths where the shim serves static data for the app (StaticDataChange), whatever the levels. */
export const STATIC_DATA_PATHS: ReadonlyMap<string, StaticDataChange> = new Map(
  CHANGES.flatMap((c) => (c.staticData ? [[c.staticData.path, c.staticData] as const] : [])),
);

/** The static data an app shown `shown` is served in front of an upstream at `real` (StaticDataChange). */
export function staticDataFor(real: number, shown: number): StaticDataChange[] {
  return between(real, shown).flatMap((c) => (c.staticData ? [c.staticData] : []));
}

/** The id of the change by which the app's `endpoint` is emulated in front of an upstream at `real` (AppEmulationChange), or undefined. */
export function emulationOf(endpoint: string, real: number, shown: number): string | undefined {
  return between(real, shown).find((c) => c.appEmulation?.endpoint === endpoint)?.feature;
}

/** An edit of a parsed answer a request's parameters call for (ParameterChange), with its change's id; true when it changed it. */
export interface AnswerEdit {
  readonly id: string;
  edit(answer: Record<string, unknown>): boolean;
}

/** M2: the edits of `endpoint`'s answer that parameters an upstream at `real` ignores call for, given the request's parameters (ParameterChange). */
export function parameterEdits(endpoint: string, params: RequestParams, real: number, shown: number): AnswerEdit[] {
  return between(real, shown).flatMap((c) => {
    const edit = c.parameter?.endpoint === endpoint ? c.parameter.editFor(params) : undefined;
    return edit ? [{ id: c.feature, edit }] : [];
  });
}
