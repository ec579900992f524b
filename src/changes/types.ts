import type { Member } from '../upstream/user-directory.js';

/**
 * The vocabulary of the API changes the shim bridges (U2, V1, M2). Each change names the feature
 * level that brought it and, per direction, one pure transform: user objects filled in for every
 * caller (the own profile, GET /users, GET /users/{id|email}, register's user lists); for the
 * mobile app only, its requests and message content put back into an older upstream's form, and
 * register answers, messages and events brought up to the level it is shown.
 */

/** A user object as the upstream sent it (plus what earlier changes added). */
export type UserObject = Readonly<Record<string, unknown>>;
/** The own user (GET /users/me): one user object plus its own extras. */
export type OwnUser = UserObject;

/** What a change may need from outside the object itself. */
export type Need = 'member' | 'delivery_email';

/** Values looked up for the object; a missing one is a lookup that failed or found nothing. */
export interface Lookups {
  /**
   * Whose object this is: the caller's own (GET /users/me, its own row; the default) or
   * another user's, whose real address the caller may not see (V2).
   */
  subject?: 'own' | 'other';
  /** The user's row in the realm's user list (GET /users). */
  member?: Member | undefined;
  /** The caller's own real email address (POST /register with realm_user); own object only. */
  deliveryEmail?: string | undefined;
  /** The object is one of register's `cross_realm_bots`: a system bot (V5). */
  systemBot?: boolean | undefined;
  /** The user id of an email in the realm (a 2.1 bot's `bot_owner`). */
  idOfEmail?: ((email: string) => number | undefined) | undefined;
}

/**
 * Where an added value came from: `lookup` (the upstream told the shim), `rule` (the value is
 * fixed by the upstream's era, e.g. no owners before feature level 8), `fallback` (the lookup
 * that would have told failed; a documented rule stands in, and the answer says so).
 */
export type Source = 'lookup' | 'rule' | 'fallback';

export interface Fill {
  value: unknown;
  source: Source;
}

/** A change's part in user objects (U2, V1): applied to every caller's, below its level. */
export interface UserChange {
  /** The fields it adds, in the order they are added. */
  readonly fields: readonly string[];
  readonly needs: readonly Need[];
  /**
   * Pure: a value for each of `fields` the object should have, given the object so far and the
   * lookups. A field left out is not added (bot fields on humans, V2).
   */
  fill(user: UserObject, found: Lookups): Partial<Record<string, Fill>>;
}

/**
 * A request's form or query parameters as a change edits them, in place: a parameter a change
 * leaves alone keeps its bytes, and a repeated one keeps every value in order (http/form-fields.ts).
 */
export interface RequestParams {
  /** The value the server reads (Django's QueryDict: the last one), or null. */
  get(name: string): string | null;
  has(name: string): boolean;
  /** Sets every value of `name` to `edit`'s result for it; true when one changed. */
  edit(name: string, edit: (value: string) => string): boolean;
  /**
   * Applies `edits(text)` to the value of `name` the server reads, replacing only what each edit
   * covers (edits in order, not overlapping); true when it changed.
   */
  editText(name: string, edits: (text: string) => readonly TextEdit[]): boolean;
  delete(name: string): void;
  append(name: string, value: string): void;
}

/**
 * A change's part in requests (M2): what a client shown a higher level sends, put back into the
 * form an upstream below the level knows. Applied only to the mobile app's requests (M1).
 */
export interface RequestChange {
  /** `METHOD /path` after the API prefix; `{id}` stands for one path segment of digits. */
  readonly endpoints: readonly string[];
  /**
   * Pure but for its arguments: changes the form or query parameters (and headers) in place;
   * true when anything changed.
   */
  apply(params: RequestParams, headers: Record<string, string>): boolean;
}

/** A replacement of `content.slice(start, end)` by `text`. */
export interface TextEdit {
  readonly start: number;
  readonly end: number;
  readonly text: string;
}

/** What a content change may need of the realm the message is sent to. */
export interface Site {
  /** The realm's own URL (`realm_url`, before 9.0 `realm_uri`), lower-cased, without a trailing slash. */
  readonly realmUrl?: string | undefined;
}

/** A message's content as the changes read it: the text, and the stretches Zulip's Markdown reads as text (M6). */
export interface Content {
  readonly text: string;
  /** Half-open ranges outside code spans and code blocks, in order (changes/markdown-text.ts). */
  readonly prose: ReadonlyArray<readonly [number, number]>;
}

/**
 * A change's part in message content the app writes (M6), in `content` of POST /messages and
 * PATCH /messages/{id}: what Zulip's Markdown interprets (mentions, narrow links), rewritten in
 * the older syntax only where it is interpreted, or refused where an older server cannot honour it.
 */
export interface ContentChange {
  /** Pure: the edits, inside prose only, none overlapping another change's. */
  edits?(content: Content, site: Site): TextEdit[];
  /** Pure: why the message cannot be sent to an older server (a Zulip-shaped 400's `msg`), or undefined. */
  refusal?(content: Content): string | undefined;
}

/**
 * A change's part in register answers shown the app a higher level (M2, answers up): keys its
 * parsers require that an older server does not send, with the value that server behaves with,
 * and values the answer holds in an older form, put into the level's.
 */
export interface RegisterChange {
  /** The keys it adds, in order; one the upstream sent is never touched. */
  readonly fields: readonly string[];
  /** Pure: a value for each of `fields`. */
  fill?(): Readonly<Record<string, unknown>>;
  /**
   * Pure but for `answer`: rewrites in place what the answer holds in the older form (a value
   * that changed meaning, a key inside a nested object, a key built from others the answer
   * holds); true when it changed the answer.
   */
  edit?(answer: Record<string, unknown>): boolean;
}

/**
 * A change's part in the answers and events the app receives (M2, answers up): the fields of
 * message objects (GET /messages, GET /messages/{id}) and of events (GET /events) it rewrites,
 * declared so that the answers it cannot touch pass as they came.
 */
export interface AnswerChange {
  /** Fields of a message object it rewrites. */
  readonly messageFields: readonly string[];
  /** Event type → the event's own fields it rewrites. */
  readonly eventFields: Readonly<Record<string, readonly string[]>>;
  /** Bytes every answer it changes contains: one without them is passed on unread. */
  readonly marker: string;
  /** Pure: a field's value as the level shown has it (the same value when nothing changes). */
  up(value: unknown): unknown;
  /**
   * Pure but for `event`: for an event whose declared fields change together (a property named
   * by one and valued by another), rewrites it whole instead of field by field; true when it changed.
   */
  upEvent?(event: Record<string, unknown>): boolean;
  /** For events that say a whole list where the level shown sends each change: see QueueEventChange. */
  readonly perQueue?: QueueEventChange;
}

/** What a QueueEventChange keeps per event queue: a JSON object (kept in the shared store, app/queue-state.ts). */
export type QueueState = Record<string, unknown>;

/**
 * A change's part in an event queue's events whose meaning depends on what the queue was sent
 * before (M2, events up): an older server sends the whole list again (below 134 `muted_topics`),
 * the level shown one event per change. The state (the list last sent) is kept per event queue.
 */
export interface QueueEventChange {
  /** Names the state in the store (`app_queue:<name>:…`). */
  readonly name: string;
  /** Bytes of events that bear on the state besides the change's marker: an answer with any of them is read too. */
  readonly markers: readonly string[];
  /** Pure: the state a queue starts with, from its register answer as the app receives it; undefined: nothing to keep. */
  start(answer: Record<string, unknown>): QueueState | undefined;
  /**
   * Pure but for `state`, which it brings up to after the event: the events `event` becomes (itself
   * among them where it stays), or undefined when it stays as it came. `now`: seconds since the epoch.
   */
  up(event: Record<string, unknown>, state: QueueState, now: number): Record<string, unknown>[] | undefined;
}

/** An HTTP method of a request sent to the upstream in an endpoint's place. */
export type EndpointMethod = 'GET' | 'POST' | 'PATCH' | 'DELETE';

/**
 * A change's part for an endpoint an older upstream does not have (M2): the app's request is sent
 * to the endpoint that upstream has in its place, its parameters in that endpoint's form.
 */
export interface EndpointChange {
  /** The endpoint the app calls (`METHOD /path`, as RequestChange names them). */
  readonly from: string;
  /** Where an upstream below the level takes the request: method and path after the API prefix. */
  readonly to: { readonly method: EndpointMethod; readonly path: string };
  /**
   * Pure but for its arguments: puts the parameters into the older endpoint's form in place, or
   * says why the request cannot be honoured there (a Zulip-shaped 400's `msg`, nothing sent).
   */
  apply(params: RequestParams): string | undefined;
}

/**
 * A change's part for data a newer server serves from a URL its register answer names, which an
 * older upstream keeps only in a static file of its own (M2): the shim serves it, built from that
 * file, at `path` on the realm's URL, and names it in register answers by `field`.
 */
export interface StaticDataChange {
  /** The register key holding the data's URL (absolute: the realm's URL and `path`). */
  readonly field: string;
  /** Where the shim serves the data, realm-relative (GET, the app's requests only). */
  readonly path: string;
  /** The upstream's static file the data is built from, realm-relative. */
  readonly source: string;
  /** Pure: the data as the level shown serves it, from the source file's parsed JSON; undefined when the file lacks what it needs. */
  build(source: unknown): unknown;
}

/**
 * A change's part for a request parameter an older upstream ignores (M2): the request goes on as
 * it came, and the answer is made what the parameter would have made it.
 */
export interface ParameterChange {
  /** The endpoint whose answers it edits (`METHOD /path`). */
  readonly endpoint: string;
  /**
   * Pure: for this request's parameters (as the app sent them), the edit of its parsed success
   * answer (true when it changed it), or undefined when the answer is the upstream's as it is.
   */
  editFor(params: RequestParams): ((answer: Record<string, unknown>) => boolean) | undefined;
}

/**
 * A change's part for an endpoint an older upstream has no one endpoint in place of (M2): the
 * shim answers it from calls to the endpoints that upstream has (app/ names the module that
 * does, as the change's own doc says).
 */
export interface AppEmulationChange {
  /** The endpoint the app calls (`METHOD /path`). */
  readonly endpoint: string;
}

/** What a lookup asks the upstream for: the caller's own user id, as the answer's credentials (`email`, `api_key`). */
export type Lookup = 'own_user_id';

/**
 * A change's part in one endpoint's success answer that the shim cannot fill from the answer
 * alone (M2, answers up): a field the upstream gives by another call, made after the answer.
 */
export interface LookupChange {
  /** The endpoint whose answer gains the field (`METHOD /path`). */
  readonly endpoint: string;
  /** The field it adds; one the upstream sent is never touched. */
  readonly field: string;
  readonly lookup: Lookup;
}

/**
 * A legacy push notification's payload (M7) as the app reads it: the server's `gcm_payload`, or
 * the `zulip` object of its `apns_payload.custom`. Flat: every value a string, a number or a list.
 */
export type NotificationPayload = Readonly<Record<string, unknown>>;

/** What the push relay knows of a notification's realm beyond the payload itself. */
export interface NotificationRealm {
  /** The realm's name, from its server_settings; undefined when they could not be had. */
  name?: string | undefined;
}

/**
 * A change's part in push notifications (M7): a field the app requires in a legacy payload that
 * a server below the level does not send. Applied by the push relay to every payload of a
 * notification from such a server.
 */
export interface NotificationChange {
  /** The payload fields it adds. */
  readonly fields: readonly string[];
  /** Pure: a value for each of `fields` the payload lacks; a field left out is not added. */
  fill(payload: NotificationPayload, realm: NotificationRealm): Partial<Record<string, Fill>>;
}

/**
 * The declaration-only form of a change (T2): one the shim emulates by code of its own rather
 * than by a part here (an endpoint an older server lacks, a register object built from others,
 * the modern presence API). Declared so the registry lists every change the shim bridges and
 * server_settings names it; the code that does it reads its level from the declaration.
 */
export interface Emulation {
  /** Where it is done: a module of src/. */
  readonly by: string;
}

/**
 * A server behaviour from a feature level on that the shim's own code takes into account, with
 * nothing to emulate below it (invisible mode). Declared so every feature level the shim reads is
 * in the registry; not emulated, so never named in server_settings (T2).
 */
export interface ServerBehaviour {
  /** Where it is taken into account: a module of src/. */
  readonly by: string;
}

/**
 * One entry of Zulip's API changelog the shim bridges (U2, V1, M2): the feature level that
 * brought it, and what it means for each direction the shim translates. The one registry is
 * changes/index.ts.
 */
export interface ApiChange {
  /** The feature level that brought the change: it applies to upstreams below it. */
  readonly featureLevel: number;
  /**
   * What the change emulates: named in server_settings' `zulip_compat_shim.emulated` (T2) when it
   * applies to every client (a user-object part, or an emulation).
   */
  readonly feature: string;
  readonly user?: UserChange;
  readonly request?: RequestChange;
  readonly content?: ContentChange;
  readonly register?: RegisterChange;
  readonly answer?: AnswerChange;
  readonly notification?: NotificationChange;
  readonly endpoint?: EndpointChange;
  readonly lookup?: LookupChange;
  readonly staticData?: StaticDataChange;
  readonly parameter?: ParameterChange;
  /** For the app only: an endpoint the upstream lacks, answered from calls to those it has. */
  readonly appEmulation?: AppEmulationChange;
  /** For every client: declared here, done by a handler of its own (named in T2). */
  readonly emulation?: Emulation;
  /** Not bridged, only taken into account (never named in T2). */
  readonly serverBehaviour?: ServerBehaviour;
}

/** A change with a part in user objects. */
export type UserObjectChange = ApiChange & { readonly user: UserChange };
