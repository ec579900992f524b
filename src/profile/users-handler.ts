import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ShimContext } from '../context.js';
import { recordChange, recordChanges, recordFacts, timedUpstream } from '../observability/request-facts.js';
import { sendEncoded } from '../http/compress.js';
import { errorBody, sendJson } from '../http/errors.js';
import { contentLengthOf } from '../http/headers.js';
import { isSuccess, relay, relayBuffered, rewrittenHeaders } from '../upstream/relay.js';
import type { EndpointHandler } from '../context.js';
import { forwardedHeaders, parseJsonObject, type BufferedResponse } from '../upstream/client.js';
import { realmOf, type Realm } from '../upstream/realm.js';
import { MODERN_USER_OBJECTS_LEVEL, changeIdsOfFields, changesAbove, noneAdded, type Added } from '../changes/index.js';
import { getUserById } from '../changes/fl001-get-user-by-id.js';
import { getUserByEmail } from '../changes/fl039-get-user-by-email.js';
import { levelOrZero, type ProfileContext } from './handler.js';
import { addedHeaders } from '../changes/added-headers.js';
import { deliveryEmailHidden } from '../changes/fl163-delivery-email.js';
import { lookUp } from './lookups.js';
import { backfillList, emailIndex, isRow, parseWithListInSteps, stringifyInSteps, type OwnRow } from './user-objects.js';
import { apiPrefixOf } from '../http/api-prefix.js';

/** What the user-list handlers use of the shim: the own profile's parts and the realm's user list. */
export type UsersContext = ProfileContext & Pick<ShimContext, 'users'>;

/**
 * V1–V4: `GET /users`, `GET /users/{user_id}` and `GET /users/{email}` (under /api/v1 and
 * /json) answered with the modern user object. Where the upstream has the endpoint, its answer
 * is filled by the version changes; where it does not (by id before feature level 1, by email
 * before 39), the shim answers from the realm's user list as the caller sees it, read with the
 * caller's own credentials, so the upstream checks them first (E1 for its refusal).
 */

/** Feature levels of the single-user endpoints (Zulip's API changelog: `GET /users/{user_id}` at 1, `GET /users/{email}` at 39). */
export const USER_BY_ID_LEVEL = getUserById.featureLevel;
export const USER_BY_EMAIL_LEVEL = getUserByEmail.featureLevel;

/** What a modern server answers for a user it does not have (or the caller cannot access). */
export const NO_SUCH_USER = errorBody('BAD_REQUEST', 'No such user');

/** U4, V4: the headers of an answer the shim filled; the changes that filled it recorded on its request. */
function backfilledHeaders(req: IncomingMessage, r: BufferedResponse, into: Added): Record<string, string | string[]> {
  recordChanges(req, changeIdsOfFields(into.added));
  return { ...rewrittenHeaders(r.headers), ...addedHeaders(into) };
}

/** An upstream at a level with nothing to add: its answer streamed as it came, compressed if the client takes it (V4). */
async function passOn(req: IncomingMessage, res: ServerResponse, ctx: UsersContext, realm: Realm, path: string): Promise<void> {
  const headers = forwardedHeaders(req);
  headers['accept-encoding'] = req.headers['accept-encoding'] ?? 'identity';
  recordFacts(req).kind = 'passthrough';
  const r = await timedUpstream(req, () => ctx.client.stream({ realm, method: 'GET', path, headers }));
  await relay(res, r);
}

/**
 * An upstream user list, read whole; one declared larger than upstream.maxResponseBytes is
 * passed on untouched instead, with a log line saying the backfill was skipped (as R2 does
 * for register), and undefined returned.
 */
async function readList(
  req: IncomingMessage,
  res: ServerResponse,
  ctx: UsersContext,
  realm: Realm,
  path: string,
): Promise<BufferedResponse | undefined> {
  // X3: read whole, so the exchange has a total deadline (also when passed on as too large).
  const r = await timedUpstream(req, () => ctx.client.open({ realm, method: 'GET', path, headers: forwardedHeaders(req) }));
  const limit = ctx.client.maxResponseBytes;
  const declared = contentLengthOf(r.headers);
  if (isSuccess(r.status) && declared !== undefined && declared > limit) {
    ctx.log.warn(
      { realm: realm.host, limit, bytes: declared },
      'user list larger than upstream.maxResponseBytes: passed on untouched, user backfill skipped',
    );
    recordFacts(req).kind = 'passthrough-large';
    await relay(res, r);
    return undefined;
  }
  return { status: r.status, headers: r.headers, body: await timedUpstream(req, () => r.read(limit)) };
}

function queryOf(url: string): string {
  const q = url.indexOf('?');
  return q < 0 ? '' : url.slice(q);
}

/** Would the delivery_email rule hide this object's address (V2)? Then it may be the caller's own. */
const hidden = (row: unknown) => isRow(row) && deliveryEmailHidden(row);

/**
 * V2: the caller always sees its own real address, so its own row carries it. Asked only when
 * some address in the answer is hidden (so only before 6.0), after the upstream has accepted the
 * caller's credentials for the answer: the caller's GET /users/me, cached per caller
 * (callers.ts), gives its id (and, where it shows it, its address); else the cached register
 * lookup does. Undefined when the id is unknown; either failure leaves the row at the rule's
 * `null` (E4; backfillList fills a row as the caller's own only with its address).
 */
async function ownRowOf(req: IncomingMessage, ctx: UsersContext, realm: Realm, url: string): Promise<OwnRow | undefined> {
  try {
    const me = `${apiPrefixOf(url)}/users/me`;
    const { userId, deliveryEmail } = await timedUpstream(req, () => ctx.callers.get(realm, req, me));
    if (deliveryEmail !== undefined) return { userId, deliveryEmail };
    const found = await timedUpstream(req, () => lookUp(ctx, new Set(['delivery_email']), realm, userId, forwardedHeaders(req)));
    return { userId, deliveryEmail: found.deliveryEmail };
  } catch (e) {
    ctx.log.warn({ realm: realm.host, err: e }, 'user objects: own row unknown, its delivery_email stays null');
    return undefined;
  }
}

/** GET /users: every member filled (V1, V2); the list's own rows resolve 2.1 bot owners. */
export const usersHandler: EndpointHandler<UsersContext> = async (req, res, ctx) => {
  const url = req.url ?? '/api/v1/users';
  const f = recordFacts(req);
  f.realm = (req.headers.host ?? '').toLowerCase();
  const { realm, featureLevel } = await levelOrZero(ctx, realmOf(ctx.upstreamId, req.headers));
  f.featureLevel = featureLevel;
  if (featureLevel >= MODERN_USER_OBJECTS_LEVEL) return passOn(req, res, ctx, realm, url);
  f.kind = 'users';

  const r = await readList(req, res, ctx, realm, url);
  if (!r) return;
  if (!isSuccess(r.status)) return relayBuffered(res, r); // E1
  await ctx.admission.accepted(req, realm, featureLevel); // X12: before the lookups a realm keeps
  const body = await parseWithListInSteps(r.body, 'members', parseJsonObject);
  const members = body.members;
  if (!Array.isArray(members)) return relayBuffered(res, r);
  const own = members.some(hidden) ? await ownRowOf(req, ctx, realm, url) : undefined;
  const into = noneAdded();
  const sharedOwners = new Map<string, number | undefined>();
  await backfillList(members, changesAbove(featureLevel), into, { idOfEmail: emailIndex([members], sharedOwners), own });
  ctx.users.logAmbiguousBotOwners(realm, sharedOwners); // X10
  if (into.added.length === 0) return relayBuffered(res, r); // V4: the upstream's bytes
  const out = await stringifyInSteps(body, ['members']);
  await sendEncoded(req, res, r.status, { raw: out }, backfilledHeaders(req, r, into));
};

/** The `{user_id}` or `{email}` of a single-user path. Pure. */
export function userKeyOf(url: string): { userId: number } | { email: string } | undefined {
  const path = url.split('?')[0] ?? '';
  const segment = path.slice(path.lastIndexOf('/') + 1);
  if (segment === '' || segment === 'me') return undefined;
  // Zulip's router: digits are a user id, anything else an email.
  if (/^[0-9]+$/.test(segment)) return { userId: Number(segment) };
  try {
    return { email: decodeURIComponent(segment) };
  } catch {
    return { email: segment };
  }
}

/** The change that brought the single-user endpoint of `key` (an upstream below it lacks it). */
const emulatedEndpointOf = (key: { userId: number } | { email: string }) => ('userId' in key ? getUserById : getUserByEmail);

/** GET /users/{user_id} and GET /users/{email}. */
export const userHandler: EndpointHandler<UsersContext> = async (req, res, ctx) => {
  const url = req.url ?? '';
  const key = userKeyOf(url);
  const f = recordFacts(req);
  f.realm = (req.headers.host ?? '').toLowerCase();
  const { realm, featureLevel } = await levelOrZero(ctx, realmOf(ctx.upstreamId, req.headers));
  f.featureLevel = featureLevel;
  const native = key !== undefined && featureLevel >= ('userId' in key ? USER_BY_ID_LEVEL : USER_BY_EMAIL_LEVEL);
  if (key === undefined || (native && featureLevel >= MODERN_USER_OBJECTS_LEVEL)) return passOn(req, res, ctx, realm, url);
  f.kind = 'user';
  const changes = changesAbove(featureLevel);

  if (native) {
    const r = await timedUpstream(req, () => ctx.client.fetch({ realm, method: 'GET', path: url, headers: forwardedHeaders(req) }));
    if (!isSuccess(r.status)) return relayBuffered(res, r); // E1, also the upstream's own "No such user"
    await ctx.admission.accepted(req, realm, featureLevel); // X12
    const body = parseJsonObject(r.body);
    const user = body.user;
    if (!user || typeof user !== 'object' || Array.isArray(user)) return relayBuffered(res, r);
    const own = hidden(user) ? await ownRowOf(req, ctx, realm, url) : undefined;
    const into = noneAdded();
    await backfillList([user], changes, into, { idOfEmail: () => undefined, own });
    if (into.added.length === 0) return relayBuffered(res, r); // V4
    return sendJson(res, r.status, body, backfilledHeaders(req, r, into));
  }

  // The upstream lacks the endpoint: the realm's user list as the caller sees it, read with the
  // caller's credentials and query (client_gravatar, include_custom_profile_fields).
  const listPath = `${apiPrefixOf(url)}/users${queryOf(url)}`;
  const r = await timedUpstream(req, () => ctx.client.fetch({ realm, method: 'GET', path: listPath, headers: forwardedHeaders(req) }));
  if (!isSuccess(r.status)) return relayBuffered(res, r); // E1: the caller's credentials refused
  await ctx.admission.accepted(req, realm, featureLevel); // X12
  const members = (await parseWithListInSteps(r.body, 'members', parseJsonObject)).members; // V4
  if (!Array.isArray(members)) return relayBuffered(res, r);
  recordChange(req, emulatedEndpointOf(key).feature); // the endpoint the upstream lacks
  const wanted = 'userId' in key ? key.userId : key.email.toLowerCase();
  const user = members.find(
    (m): m is Record<string, unknown> =>
      isRow(m) && (typeof wanted === 'number' ? m.user_id === wanted : String(m.email).toLowerCase() === wanted),
  );
  if (!user) return sendJson(res, 400, NO_SUCH_USER);
  const own = hidden(user) ? await ownRowOf(req, ctx, realm, url) : undefined;
  const into = noneAdded();
  const sharedOwners = new Map<string, number | undefined>();
  await backfillList([user], changes, into, { idOfEmail: emailIndex([members], sharedOwners), own });
  ctx.users.logAmbiguousBotOwners(realm, sharedOwners); // X10
  sendJson(res, 200, { result: 'success', msg: '', user }, backfilledHeaders(req, r, into));
};
