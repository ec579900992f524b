import { setImmediate } from 'node:timers/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { EndpointHandler, ShimContext } from '../context.js';
import type { PresenceContext } from '../presence/context.js';
import { recordChange, recordChanges, recordFacts, timedUpstream } from '../observability/request-facts.js';
import { parseParams, readBody, type Bounded, type Params } from '../http/body.js';
import { sendEncoded } from '../http/compress.js';
import { isRefused, isSuccess, relay, relayBounded, relayBuffered, rewrittenHeaders, type Refused } from '../upstream/relay.js';
import { forwardedHeaders, type OpenedResponse, type UpstreamCall } from '../upstream/client.js';
import { FL } from '../upstream/feature-level.js';
import { levelShownTo } from '../app/presented.js';
import { hasCredentials, realmOf, type Realm } from '../upstream/realm.js';
import { limitLegacyHistory, presenceEra } from '../presence/convert.js';
import { idForLegacyPresences, registerPresences } from '../presence/answers.js';
import { historyCutoff } from '../presence/ledger.js';
import type { Asker } from '../presence/context.js';
import { takeInAnswer, type Format } from '../presence/intake.js';
import { upstreamTime } from '../presence/upstream-time.js';
import { parseJsonInt, readJsonBool } from '../presence/params.js';
import { everyCallerSeesTheSameUsers } from '../presence/snapshots.js';
import {
  backfillRegisterUsers,
  eventTypesOf,
  settingTypesToAdd,
  withFetchTypes,
  fetchesType,
  parseRegisterAnswer,
  registerNeedsUsers,
  serializeRegister,
  type EventTypes,
} from './users.js';
import { userSettings, type LegacySettingType } from '../changes/fl089-user-settings.js';
import { addedHeaders } from '../changes/added-headers.js';
import { changeIdsOfFields, noneAdded, type Added } from '../changes/index.js';
import { editRegister, registerAdditions } from '../changes/app-parts.js';
import { presenceSettings } from '../changes/fl164-presence-settings.js';
import { registerPresenceLastUpdateId } from '../changes/fl263-presence-last-update-id.js';
import { addStaticDataUrls } from '../app/static-data.js';
import { startQueueStates } from '../app/queue-state.js';

/**
 * POST /api/v1/register and /json/register (R1, R2): when the answer carries presence, its
 * presences feed the realm's ledger like a presence poll, and the answer gains
 * `presence_last_update_id` (and `server_timestamp` where an old upstream omits it), with the
 * modern format when the client asked for `slim_presence`. Everything else in the answer keeps
 * its meaning; a register without presence is passed on byte for byte.
 *
 * Four decisions, each made once before the call (planRegister): presence (R1), the user objects
 * (V1), the mobile app's presented level (M1), and the legacy settings `user_settings` is built
 * from (V3). The handler reads them as steps.
 */

/**
 * What the register handler uses of the shim: the presence poll's parts (its intake and ledger),
 * and where the mobile app's per-shim state is kept (app/).
 */
export type RegisterContext = PresenceContext & Pick<ShimContext, 'layerState'>;

/** What the shim does with one register, decided before the upstream is called. */
interface RegisterPlan {
  realm: Realm;
  featureLevel: number;
  params: Params;
  types: EventTypes;
  /** R2: the client's request as it goes upstream (V3's setting types added, nothing else). */
  call: UpstreamCall & { method: 'POST' };
  /** R1: the answer's presence feeds the ledger (an upstream below the modern presence API, presence fetched). */
  withPresence: boolean;
  /** X12: the realm keeps presence state (the upstream accepted the caller for it). */
  keepsPresence: boolean;
  /** P12 in register (feature level 288), read before the call (E3). */
  historyLimitDays: number | undefined;
  /** V1, V3: the answer is read for its user objects or its user_settings. */
  withUsers: boolean;
  /** V3: the legacy setting types the shim asked for where the client did not. */
  settingTypes: LegacySettingType[];
  /** M1: the mobile app is shown another level than the upstream's. */
  presenting: boolean;
}

/** Do the event types fetched at register include presence? */
function fetchesPresence(types: EventTypes): boolean {
  // Unreadable: the upstream will reject it; the answer then passes unchanged (E1).
  return types.unreadable || fetchesType(types, 'presence');
}

/**
 * A logged-out visitor's answer (a web-public realm, 5.0+): Zulip gives it no event queue,
 * `queue_id: null`, which no other register answer has, and no presence (`presences: {}`).
 */
function isSpectators(answer: Record<string, unknown>): boolean {
  return answer.queue_id === null;
}

/** Adds each of `keys` the answer lacks, named as added by rule (V4); a key the upstream sent is never touched. */
function addMissing(answer: Record<string, unknown>, keys: Readonly<Record<string, unknown>>, added: Added): void {
  for (const [key, value] of Object.entries(keys)) {
    if (key in answer) continue;
    answer[key] = value;
    added.added.push(key);
    added.sources[key] = 'rule';
  }
}

/**
 * X12: whether the upstream refused the caller a realm new to the shim (its credentials), so the
 * realm keeps no state. Throws NewRealmsTooFastError past the rate of new realms.
 */
async function admissionRefused(req: IncomingMessage, ctx: RegisterContext, realm: Realm, featureLevel: number): Promise<boolean> {
  return (await timedUpstream(req, () => ctx.admission.admitCaller(req, realm, featureLevel))) !== undefined;
}

/** A register the upstream accepted with presence, for a realm it had refused the caller just before (X12). */
function presenceNotKept(ctx: RegisterContext, realm: Realm): void {
  ctx.log.warn(
    { realm: realm.host },
    "register: presence passed on as the upstream sent it: the realm is new to the shim and the upstream refused the caller's GET /users/me",
  );
}

/** X3: nothing in the answer changes: it is passed on as it streams, never read by the shim. */
const passedOnUnread = (plan: RegisterPlan) => !plan.withPresence && !plan.withUsers && !plan.presenting;

/** The four decisions, in the order their checks run: E3's before any call, X12's admission last. */
async function planRegister(req: IncomingMessage, ctx: RegisterContext): Promise<RegisterPlan | Refused> {
  const requestBody = await readBody(req, ctx.config.server.bodyLimitBytes);
  const params = await parseParams(req, requestBody);
  // X12: the realm the upstream serves for this Host keys its state.
  const resolved = await timedUpstream(req, () => ctx.featureLevels.resolve(realmOf(ctx.upstreamId, req.headers)));
  if (isRefused(resolved)) return resolved; // E1
  const { realm, featureLevel } = resolved;
  const facts = recordFacts(req);
  facts.realm = realm.host;
  facts.featureLevel = featureLevel;
  // The client's request goes upstream as it came (R2); only the answer may change.
  const headers: Record<string, string> = { ...forwardedHeaders(req) };
  if (req.headers['content-type']) headers['content-type'] = req.headers['content-type'];
  const types = eventTypesOf(params); // parsed once, for every question below
  const withPresence = featureLevel < FL.LAST_UPDATE_ID && fetchesPresence(types);
  const withUsers = registerNeedsUsers(featureLevel, types); // V1, V3: register/users.ts
  // V3: the legacy settings user_settings is built from, asked for where the client did not.
  const settingTypes = settingTypesToAdd(featureLevel, types);
  const body = settingTypes.length > 0 ? await withFetchTypes(req, requestBody, types, settingTypes, headers) : requestBody;
  // P12 in register (feature level 288), which old servers do not know: E3 before the call.
  const historyLimitDays = withPresence
    ? parseJsonInt('presence_history_limit_days', params.get('presence_history_limit_days'))
    : undefined;
  // M1: the mobile app is shown the level the operator chose, where the shim can serve it.
  const presenting = levelShownTo(ctx.config.app, req.headers, featureLevel) !== featureLevel;
  if (!withPresence && !withUsers && !presenting) headers['accept-encoding'] = req.headers['accept-encoding'] ?? 'identity';
  // X12: a realm new to the shim keeps presence state once the upstream accepts the caller for
  // it; until then (no credentials: a logged-out visitor's, or refused ones) its presence goes on as it came.
  const keepsPresence = withPresence && hasCredentials(req.headers) && !(await admissionRefused(req, ctx, realm, featureLevel));
  const call = { realm, method: 'POST' as const, path: req.url ?? '/api/v1/register', headers, body };
  return { realm, featureLevel, params, types, call, withPresence, keepsPresence, historyLimitDays, withUsers, settingTypes, presenting };
}

/** An answer larger than upstream.maxResponseBytes: passed on untouched, what was not done to it logged. */
function passOnLarge(res: ServerResponse, ctx: RegisterContext, plan: RegisterPlan, upstream: OpenedResponse, bounded: Bounded) {
  // For M1, the mobile app then sees the answer's own level and refuses a server below 9.0.
  const skipped: string[] = [];
  if (plan.withPresence) skipped.push('presence');
  if (plan.withUsers) skipped.push('user backfill');
  if (plan.presenting) skipped.push("the mobile app's presented level");
  const limit = ctx.config.upstream.maxResponseBytes;
  ctx.log.warn(
    { realm: plan.realm.host, limit, skipped },
    `register answer larger than upstream.maxResponseBytes: passed on untouched, ${skipped.join(' and ')} skipped`,
  );
  return relayBounded(res, upstream, bounded);
}

/**
 * The answer parsed, with the level it says (X13: an upstream upgraded while the shim runs is
 * seen at its new level from now on) and, for M1, the level the app is shown on that level.
 * Returns the upstream's level as the answer gives it.
 */
async function readAnswer(req: IncomingMessage, ctx: RegisterContext, plan: RegisterPlan, bytes: Buffer) {
  const answer = await parseRegisterAnswer(bytes);
  await setImmediate(); // a large register answer: let other requests run after parsing it
  const { featureLevel } = plan;
  const said = answer.zulip_feature_level;
  const answered = typeof said === 'number' && Number.isInteger(said) && said > featureLevel ? said : featureLevel;
  if (answered > featureLevel) ctx.featureLevels.raised(plan.realm, answered);
  // M1 on the level the answer itself gives: an upstream just upgraded past the presented level is shown as it is.
  if (plan.presenting) answer.zulip_feature_level = levelShownTo(ctx.config.app, req.headers, answered);
  return { answer, answered };
}

/** V1, V3: the answer's user objects filled and user_settings built; what was added (U4). */
async function fillUsers(req: IncomingMessage, ctx: RegisterContext, plan: RegisterPlan, answer: Record<string, unknown>): Promise<Added> {
  if (!plan.withUsers) return noneAdded();
  const sharedOwners = new Map<string, number | undefined>();
  const users = await backfillRegisterUsers(answer, plan.featureLevel, plan.types, sharedOwners, plan.settingTypes);
  ctx.users.logAmbiguousBotOwners(plan.realm, sharedOwners); // X10
  if (users.notBuilt) {
    // W1: never half an object; the client keeps the old-server path it has.
    ctx.log.warn(
      { realm: plan.realm.host, missing: users.notBuilt },
      'register: user_settings left out, the upstream did not send a setting it has',
    );
  } else if (users.added.includes('user_settings')) recordChange(req, userSettings.feature);
  return users;
}

/**
 * M2: what the app's parsers require at the level it is shown, which the upstream at `answered`
 * does not send: the answer's own keys, the URLs of data the shim serves, and the state kept per
 * event queue for the events to come.
 */
async function presentLevel(
  req: IncomingMessage,
  ctx: RegisterContext,
  plan: RegisterPlan,
  answer: Record<string, unknown>,
  answered: number,
  added: Added,
) {
  if (!plan.presenting) return;
  const shown = answer.zulip_feature_level as number;
  recordChanges(req, editRegister(answer, answered, shown));
  addMissing(answer, registerAdditions(answered, shown), added);
  addStaticDataUrls(ctx, plan.realm, answer, answered, shown, added);
  await startQueueStates(ctx, plan.realm, answer, answered, shown);
}

/** The answer's presence map, when R1 applies to it: fetched, kept by the realm, and not a visitor's. */
function presencesToTakeIn(plan: RegisterPlan, answer: Record<string, unknown>): Record<string, unknown> | undefined {
  const presences = answer.presences;
  if (!plan.withPresence || isSpectators(answer) || !plan.keepsPresence) return undefined;
  return presences && typeof presences === 'object' && !Array.isArray(presences) ? (presences as Record<string, unknown>) : undefined;
}

/**
 * No presence of the realm in the answer (a logged-out visitor's, an upstream that left it out):
 * as it came unless something was added (V4). A visitor's empty map is nobody's view of the realm
 * (P7): taken in, it would have put every user out of view; answered from the ledger, it would
 * have shown a visitor what Zulip shows only the realm's users. Its presence settings are added
 * all the same (W2), as a modern server sends them to a visitor too.
 */
function withoutPresence(ctx: RegisterContext, plan: RegisterPlan, answer: Record<string, unknown>, added: Added): boolean {
  if (plan.withPresence && isSpectators(answer)) addMissing(answer, presenceSettings.register.fill(), added);
  else if (plan.withPresence && !plan.keepsPresence) presenceNotKept(ctx, plan.realm);
  return added.added.length > 0 || plan.settingTypes.length > 0 || plan.presenting;
}

/** R1: the answer's presence taken into the realm's ledger, and answered as the client asked (modern or legacy). */
async function rewritePresence(
  ctx: RegisterContext,
  req: IncomingMessage,
  plan: RegisterPlan,
  upstream: OpenedResponse,
  answer: Record<string, unknown>,
  presences: Record<string, unknown>,
): Promise<void> {
  const { featureLevel, historyLimitDays } = plan;
  const slimAsked = readJsonBool(plan.params.get('slim_presence')) === true;
  // What the upstream sent: 2.1 ignores slim_presence and always answers legacy.
  const format: Format = slimAsked && featureLevel >= FL.SLIM_PRESENCE ? 'slim' : 'legacy';
  const asker: Asker = { ctx, req, realm: plan.realm, era: presenceEra(featureLevel) };
  const serverTimestamp = upstreamTime(answer, upstream.headers);
  // A register answer shows the realm as the caller sees it: complete where all see the same.
  const complete = everyCallerSeesTheSameUsers(ctx.config.presence.shareSnapshots, featureLevel);
  const dateTimed = typeof answer.server_timestamp !== 'number'; // before feature level 70 (P6)
  const intake = await takeInAnswer(asker, format, presences, serverTimestamp, complete, dateTimed);
  if (slimAsked && intake.modernError) throw intake.modernError; // no legacy map where modern was asked
  if (slimAsked && intake.modern) {
    // R1: the modern format with both timestamps, also where the upstream ignored the flag.
    const modern = await registerPresences(asker, intake, intake.modern, complete, historyLimitDays);
    answer.presences = modern.presences;
    answer.presence_last_update_id = modern.presenceLastUpdateId;
  } else {
    const cutoff = historyCutoff(historyLimitDays, serverTimestamp);
    if (cutoff !== undefined) answer.presences = limitLegacyHistory(presences, cutoff);
    const empty = Object.keys(answer.presences as Record<string, unknown>).length === 0;
    answer.presence_last_update_id = await idForLegacyPresences(asker, intake, serverTimestamp, historyLimitDays, empty);
  }
  if (answer.server_timestamp === undefined) answer.server_timestamp = serverTimestamp;
  recordChange(req, registerPresenceLastUpdateId.feature);
}

export const registerHandler: EndpointHandler<RegisterContext> = async (req, res, ctx) => {
  const plan = await planRegister(req, ctx);
  if (isRefused(plan)) return relayBuffered(res, plan.refused); // E1: the upstream refused the Host's server_settings
  const facts = recordFacts(req);
  // X3: an answer the shim reads ends within the deadline; one passed on streams.
  if (passedOnUnread(plan)) {
    const streamed = await timedUpstream(req, () => ctx.client.stream(plan.call));
    facts.kind = 'passthrough';
    return relay(res, streamed);
  }
  const upstream = await timedUpstream(req, () => ctx.client.open(plan.call));
  if (!isSuccess(upstream.status)) {
    facts.kind = 'passthrough';
    return relay(res, upstream);
  }
  // A reset or a silent upstream mid-answer is E2's, not an internal error.
  const bounded = await upstream.readUpTo(ctx.config.upstream.maxResponseBytes);
  if (!bounded.whole) {
    facts.kind = 'passthrough-large';
    return passOnLarge(res, ctx, plan, upstream, bounded);
  }
  const started = performance.now();
  const { answer, answered } = await readAnswer(req, ctx, plan, bounded.body);
  // What the answer gains, named in its headers (V4, W2).
  const added = await fillUsers(req, ctx, plan, answer);
  await presentLevel(req, ctx, plan, answer, answered, added);
  const presences = presencesToTakeIn(plan, answer);
  if (!presences) {
    if (!withoutPresence(ctx, plan, answer, added)) return relayBounded(res, upstream, bounded);
    facts.kind = 'register';
    recordChanges(req, changeIdsOfFields(added.added)); // the changes' fields and keys (V1, W2, M2)
    const serialized = await serializeRegister(answer);
    await sendEncoded(req, res, upstream.status, { raw: serialized }, { ...rewrittenHeaders(upstream.headers), ...addedHeaders(added) });
    return;
  }
  await rewritePresence(ctx, req, plan, upstream, answer, presences);
  addMissing(answer, presenceSettings.register.fill(), added); // W2
  const serialized = Buffer.from(JSON.stringify(answer));
  facts.kind = 'register';
  recordChanges(req, changeIdsOfFields(added.added));
  ctx.log.debug({ bytes: serialized.length, ms: Math.round(performance.now() - started) }, 'register presence rewritten');
  await sendEncoded(req, res, upstream.status, { raw: serialized }, { ...rewrittenHeaders(upstream.headers), ...addedHeaders(added) });
};
