import { isUtf8 } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  answerChangesFor,
  answerListOf,
  type AnswerEdit,
  emulationOf,
  endpointKey,
  lookupsFor,
  parameterEdits,
  STATIC_DATA_PATHS,
  staticDataFor,
  TRANSLATED_ENDPOINTS,
  translateAnswer,
  translateRequest,
} from '../changes/app-parts.js';
import { parseWithListInSteps, stringifyInSteps } from '../profile/user-objects.js';
import { changeIdsOf } from '../changes/index.js';
import type { AnswerChange, EndpointChange, LookupChange, Site } from '../changes/types.js';
import type { EndpointHandler, ShimContext } from '../context.js';
import { isFormEncoded, readBody, readUpTo } from '../http/body.js';
import { sendEncoded } from '../http/compress.js';
import { badRequest } from '../http/errors.js';
import { FormFields } from '../http/form-fields.js';
import { apiPathOf } from '../http/api-routes.js';
import { contentLengthOf } from '../http/headers.js';
import { recordChange, recordChanges, recordFacts, timedUpstream } from '../observability/request-facts.js';
import { forwardedHeaders, parseJsonObject, translate, type UpstreamCall, type UpstreamResponse } from '../upstream/client.js';
import { realmOf, type Realm } from '../upstream/realm.js';
import { isRefused, isSuccess, relay, relayBounded, relayBuffered, rewrittenHeaders } from '../upstream/relay.js';
import { appLevelFor, levelShownTo } from './presented.js';
import { emulateFlagsNarrow } from './flags-narrow.js';
import { queueStep, type QueueStep } from './queue-state.js';
import { serveStaticData } from './static-data.js';

/** What the app's translator uses of the shim (M2). */
export type AppContext = Pick<ShimContext, 'config' | 'log' | 'upstreamId' | 'client' | 'featureLevels' | 'store' | 'layerState'>;

/** The changes' name of an endpoint (changes/app-parts.ts endpointKey); undefined outside the API. */
export function endpointOf(method: string | undefined, path: string): string | undefined {
  const at = apiPathOf(path);
  return at && endpointKey(method ?? '', at.rest);
}

/**
 * M2: is this a request of the app that a change may apply to? (Decided before the upstream's
 * level is known.) Runs on every passed-through request: with the flag off, one test.
 */
export function isTranslatedAppRequest(
  app: Parameters<typeof appLevelFor>[0],
  req: { method?: string | undefined; headers: Parameters<typeof appLevelFor>[1] },
  path: string,
): boolean {
  if (app.featureLevel === undefined || appLevelFor(app, req.headers) === undefined) return false;
  if (req.method === 'GET' && STATIC_DATA_PATHS.has(path)) return true;
  const endpoint = endpointOf(req.method, path);
  return endpoint !== undefined && TRANSLATED_ENDPOINTS.has(endpoint);
}

/** An app request as it goes upstream: its target and body, and whether either was translated. */
interface Outgoing {
  target: string;
  body?: Buffer | string;
  translated: boolean;
  /** The method, where an endpoint change sends the request elsewhere. */
  method?: EndpointChange['to']['method'];
}

/**
 * The request in the form the upstream knows (M2, M6): its query (GET) or form body translated
 * in place, every byte a change does not touch as it came. A body that is not a UTF-8 form (a
 * multipart upload, say) goes on as it came. A content the upstream cannot honour is refused (400).
 */
async function requestDown(req: IncomingMessage, ctx: AppContext, level: Levels, headers: Record<string, string>): Promise<Outgoing> {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  let path = q < 0 ? url : url.slice(0, q);
  let to: EndpointChange['to'] | undefined;
  const translateForm = (raw: string): string | undefined => {
    const form = new FormFields(raw);
    const done = translateRequest(level.endpoint, form, level.real, level.shown, headers, level.site);
    recordChanges(req, done.applied);
    if (done.refusal !== undefined) throw badRequest(done.refusal);
    to = done.to;
    return form.edited ? form.toString() : undefined;
  };
  if (req.method === 'GET') {
    const query = translateForm(q < 0 ? '' : url.slice(q + 1));
    return query === undefined ? { target: url, translated: false } : { target: `${path}?${query}`, translated: true };
  }
  const raw = await readBody(req, ctx.config.server.bodyLimitBytes);
  const type = req.headers['content-type'] ?? '';
  if (type) headers['content-type'] = type;
  const form = level.shown > level.real && isFormEncoded(type) && isUtf8(raw) ? translateForm(raw.toString('utf8')) : undefined;
  const moved = to as EndpointChange['to'] | undefined;
  if (moved) path = `${apiPathOf(path)?.prefix ?? ''}${moved.path}`;
  const target = q < 0 ? path : `${path}${url.slice(q)}`;
  const outgoing: Outgoing = form === undefined ? { target, body: raw, translated: false } : { target, body: form, translated: true };
  return moved ? { ...outgoing, method: moved.method, translated: true } : outgoing;
}

/**
 * M2, answers up by a lookup (LookupChange): the caller's own user id, asked of the upstream as
 * GET /users/me with the credentials the answer itself holds (POST /fetch_api_key's `email` and
 * `api_key`, which are never logged). Undefined when the upstream does not say it.
 */
async function lookUp(ctx: AppContext, call: LookupCall, answer: Record<string, unknown>, lookup: LookupChange): Promise<unknown> {
  const { email, api_key: key } = answer;
  if (lookup.lookup !== 'own_user_id' || typeof email !== 'string' || typeof key !== 'string') return undefined;
  const headers = { ...call.headers, authorization: `Basic ${Buffer.from(`${email}:${key}`).toString('base64')}` };
  const r = await ctx.client.fetch({ realm: call.realm, method: 'GET', path: `${call.prefix}/users/me`, headers });
  if (!isSuccess(r.status)) return undefined;
  const id = parseJsonObject(r.body).user_id;
  return typeof id === 'number' ? id : undefined;
}

/** What a lookup's call needs of the request it serves. */
interface LookupCall {
  realm: ReturnType<typeof realmOf>;
  prefix: string;
  headers: Record<string, string>;
}

/** A success of an endpoint with lookups (LookupChange), read whole and given each field it lacks; else as it came. */
async function answerWithLookups(
  req: IncomingMessage,
  res: ServerResponse,
  ctx: AppContext,
  r: UpstreamResponse,
  call: LookupCall,
  lookups: readonly LookupChange[],
): Promise<void> {
  const encoding = r.headers['content-encoding'];
  if (!isSuccess(r.status) || (encoding !== undefined && encoding !== 'identity')) return relay(res, r);
  const bounded = await readUpTo(r.body, ctx.config.upstream.maxResponseBytes, contentLengthOf(r.headers)).catch((e: unknown) => {
    throw translate(e);
  });
  if (!bounded.whole) return relayBounded(res, r, bounded);
  const answer = parseJsonObject(bounded.body);
  let changed = false;
  for (const lookup of lookups) {
    if (lookup.field in answer) continue;
    const value = await timedUpstream(req, () => lookUp(ctx, call, answer, lookup));
    if (value === undefined) {
      ctx.log.warn({ field: lookup.field, lookup: lookup.lookup }, "app answer: the upstream did not say a field the app's level has");
      continue;
    }
    answer[lookup.field] = value;
    changed = true;
    recordChanges(req, changeIdsOf([lookup]));
  }
  if (!changed) return relayBounded(res, r, bounded);
  recordFacts(req).kind = 'app-translated';
  await sendEncoded(req, res, r.status, { raw: Buffer.from(JSON.stringify(answer)) }, rewrittenHeaders(r.headers));
}

/** The levels a request is translated between, and what its content's links are checked against. */
interface Levels {
  endpoint: string;
  real: number;
  shown: number;
  site: Site;
}

/** The endpoints the shim answers itself in front of an upstream without them (AppEmulationChange). */
const EMULATORS: Readonly<Record<string, typeof emulateFlagsNarrow>> = { 'POST /messages/flags/narrow': emulateFlagsNarrow };

/**
 * M2, answers up: a success carrying messages or events, rewritten by `changes` where it holds
 * what they change (their markers), by the `edits` its request's parameters call for and by its
 * event queue's `step` (QueueEventChange); every other answer goes on as it came. An answer larger than
 * upstream.maxResponseBytes, or one the upstream compressed anyway, is passed on untouched.
 */
async function answerUp(
  req: IncomingMessage,
  res: ServerResponse,
  ctx: AppContext,
  r: UpstreamResponse,
  endpoint: string,
  changes: readonly AnswerChange[],
  edits: readonly AnswerEdit[] = [],
  step?: QueueStep,
): Promise<void> {
  const encoding = r.headers['content-encoding'];
  if (!isSuccess(r.status) || (encoding !== undefined && encoding !== 'identity')) return relay(res, r);
  const limit = ctx.config.upstream.maxResponseBytes;
  const bounded = await readUpTo(r.body, limit, contentLengthOf(r.headers)).catch((e: unknown) => {
    throw translate(e);
  });
  if (!bounded.whole) {
    ctx.log.warn({ endpoint, limit }, "app answer larger than upstream.maxResponseBytes: passed on untouched, the app's changes skipped");
    return relayBounded(res, r, bounded);
  }
  const marked = changes.some((c) => bounded.body.includes(c.marker)) || (step?.markers.some((m) => bounded.body.includes(m)) ?? false);
  if (edits.length === 0 && !marked) {
    await step?.idle();
    return relayBounded(res, r, bounded);
  }
  // A long list of messages is read and written a part at a time, letting other requests run between (V4's way).
  const list = answerListOf(endpoint);
  const answer = list ? await parseWithListInSteps(bounded.body, list, parseJsonObject) : parseJsonObject(bounded.body);
  const applied: string[] = [];
  let changed = translateAnswer(endpoint, answer, changes, applied);
  for (const { id, edit } of edits) {
    if (!edit(answer)) continue;
    changed = true;
    applied.push(id);
  }
  if (step && (await step.run(answer))) {
    changed = true;
    applied.push(...changeIdsOf(changes.filter((c) => c.perQueue))); // the changes whose per-queue parts the step ran
  }
  recordChanges(req, applied);
  if (!changed) return relayBounded(res, r, bounded);
  recordFacts(req).kind = 'app-translated';
  const raw = list ? await stringifyInSteps(answer, [list]) : Buffer.from(JSON.stringify(answer));
  await sendEncoded(req, res, r.status, { raw }, rewrittenHeaders(r.headers));
}

/**
 * What the answer to an app request goes through (all empty: it is relayed as it comes): the
 * answer changes between its levels, the lookups, the edits its parameters call for (a GET's
 * query), and its event queue's step (GET /events).
 */
function answerPlan(ctx: AppContext, realm: Realm, method: string, level: Levels, query: string) {
  const { endpoint, real, shown } = level;
  return {
    changes: answerChangesFor(endpoint, real, shown),
    lookups: lookupsFor(endpoint, real, shown),
    edits: method === 'GET' ? parameterEdits(endpoint, new FormFields(query), real, shown) : [],
    step: endpoint === 'GET /events' ? queueStep(ctx, realm, new URLSearchParams(query), real, shown) : undefined,
  };
}

/**
 * M2, both ways: an app request (shown a higher level than the upstream has) in the form the
 * upstream knows, then its answer brought up to the level shown where a change touches it,
 * else passed on as it comes.
 */
export const appRequestHandler: EndpointHandler<AppContext> = async (req, res, ctx) => {
  const hostRealm = realmOf(ctx.upstreamId, req.headers);
  const resolved = await timedUpstream(req, () => ctx.featureLevels.resolve(hostRealm));
  if (isRefused(resolved)) return relayBuffered(res, resolved.refused); // E1
  const { realm, featureLevel: real, realmUrl } = resolved;
  const facts = recordFacts(req);
  facts.realm = realm.host;
  facts.featureLevel = real;
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  const endpoint = endpointOf(req.method, path) ?? '';
  const level: Levels = { endpoint, real, shown: levelShownTo(ctx.config.app, req.headers, real), site: { realmUrl } };
  const staticData = STATIC_DATA_PATHS.get(path);
  if (staticData && staticDataFor(real, level.shown).includes(staticData)) {
    recordChanges(req, changeIdsOf([staticData]));
    return serveStaticData(req, res, ctx, hostRealm, staticData);
  }
  const emulation = emulationOf(endpoint, real, level.shown);
  const emulator = emulation === undefined ? undefined : EMULATORS[endpoint];
  if (emulation !== undefined && emulator) {
    recordChange(req, emulation);
    return emulator(req, res, ctx, hostRealm, level);
  }
  return translated(req, res, ctx, { hostRealm, realm, level, query: q < 0 ? '' : url.slice(q + 1) });
};

/** Where an app request is translated: the realm of its Host, the realm it resolved to, its levels and its query. */
interface Translation {
  hostRealm: Realm;
  realm: Realm;
  level: Levels;
  query: string;
}

/** M2 for an endpoint the upstream has: the request sent down, its answer brought up where a change touches it. */
async function translated(req: IncomingMessage, res: ServerResponse, ctx: AppContext, t: Translation): Promise<void> {
  const { hostRealm, level } = t;
  // Only a translated endpoint's request comes here (isTranslatedAppRequest): GET, POST or PATCH;
  // a static data's path the upstream serves itself goes on untranslated.
  const method = req.method as 'GET' | 'POST' | 'PATCH';
  const { changes, lookups, edits, step } = answerPlan(ctx, t.realm, method, level, t.query);
  const rewritten = changes.length > 0 || lookups.length > 0 || edits.length > 0 || step !== undefined;
  const headers: Record<string, string> = {
    ...forwardedHeaders(req),
    // An answer the shim may rewrite is asked for uncompressed; it is compressed again for the app.
    'accept-encoding': rewritten ? 'identity' : (req.headers['accept-encoding'] ?? 'identity'),
  };
  const lookupHeaders = { ...headers };
  delete lookupHeaders.authorization;
  const out = await requestDown(req, ctx, level, headers);
  recordFacts(req).kind = out.translated ? 'app-translated' : 'passthrough';
  const call = { realm: hostRealm, method: out.method ?? method, path: out.target, headers };
  const r = await streamedWhileWanted(req, res, ctx, out.body === undefined ? call : { ...call, body: out.body });
  if (!r) return; // nobody is left to answer
  if (lookups.length > 0) {
    const prefix = apiPathOf((req.url ?? '/').split('?')[0]!)?.prefix ?? '/api/v1';
    return answerWithLookups(req, res, ctx, r, { realm: hostRealm, prefix, headers: lookupHeaders }, lookups);
  }
  return changes.length > 0 || edits.length > 0 || step ? answerUp(req, res, ctx, r, level.endpoint, changes, edits, step) : relay(res, r);
}

/**
 * The upstream's answer, streamed; undefined when the app went away before it came. A long poll
 * the app gives up on (it does, on every reconnect) is not left held upstream.
 */
async function streamedWhileWanted(
  req: IncomingMessage,
  res: ServerResponse,
  ctx: AppContext,
  call: Omit<UpstreamCall, 'signal'>,
): Promise<UpstreamResponse | undefined> {
  const gone = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) gone.abort();
  });
  try {
    return await timedUpstream(req, () => ctx.client.stream({ ...call, signal: gone.signal }));
  } catch (e) {
    if (gone.signal.aborted) return undefined;
    throw e;
  }
}
