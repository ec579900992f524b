import { setImmediate } from 'node:timers/promises';
import type { IncomingMessage } from 'node:http';
import type { EndpointHandler, ShimContext } from '../context.js';
import { recordFacts, timedUpstream } from '../observability/request-facts.js';
import { parseParams, readBody } from '../http/body.js';
import { sendEncoded } from '../http/compress.js';
import { isSuccess, relay, relayBounded, rewrittenHeaders } from '../upstream/relay.js';
import { forwardedHeaders } from '../upstream/client.js';
import { FL } from '../upstream/feature-level.js';
import { levelShownTo } from '../app/presented.js';
import { hasCredentials, realmOf, type Realm } from '../upstream/realm.js';
import { limitLegacyHistory, presenceEra } from '../presence/convert.js';
import { idForLegacyPresences, registerPresences } from '../presence/answers.js';
import { historyCutoff } from '../presence/ledger.js';
import { takeInAnswer, upstreamTime, type Asker, type Format } from '../presence/intake.js';
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
import { addedHeaders } from '../profile/handler.js';
import { noneAdded, type Added } from '../changes/index.js';
import { editRegister, registerAdditions } from '../changes/app-parts.js';
import { addStaticDataUrls } from '../app/static-data.js';
import { startQueueStates } from '../app/queue-state.js';

/**
 * POST /api/v1/register and /json/register (R1, R2): when the answer carries presence, its
 * presences feed the realm's ledger like a presence poll, and the answer gains
 * `presence_last_update_id` (and `server_timestamp` where an old upstream omits it), with the
 * modern format when the client asked for `slim_presence`. Everything else in the answer keeps
 * its meaning; a register without presence is passed on byte for byte.
 */

/**
 * W2: the presence settings of a register answer (feature level 164) where the upstream lacks
 * them: servers before 7.0 behave with exactly these (clients hard-coded them).
 */
const OLD_SERVER_PRESENCE_SETTINGS = {
  server_presence_ping_interval_seconds: 60,
  server_presence_offline_threshold_seconds: 140,
} as const;

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
async function admissionRefused(req: IncomingMessage, ctx: ShimContext, realm: Realm, featureLevel: number): Promise<boolean> {
  return (await timedUpstream(req, () => ctx.admission.admitCaller(req, realm, featureLevel))) !== undefined;
}

/** A register the upstream accepted with presence, for a realm it had refused the caller just before (X12). */
function presenceNotKept(ctx: ShimContext, realm: Realm): void {
  ctx.log.warn(
    { realm: realm.host },
    "register: presence passed on as the upstream sent it: the realm is new to the shim and the upstream refused the caller's GET /users/me",
  );
}

export const registerHandler: EndpointHandler = async (req, res, ctx) => {
  const raw = await readBody(req, ctx.config.server.bodyLimitBytes);
  const params = await parseParams(req, raw);
  // X12: the realm the upstream serves for this Host keys its state.
  const { realm, featureLevel } = await timedUpstream(req, () => ctx.featureLevels.resolve(realmOf(ctx.upstreamId, req.headers)));
  const f = recordFacts(req);
  f.realm = realm.host;
  f.featureLevel = featureLevel;

  // The client's request goes upstream as it came (R2); only the answer may change.
  const headers: Record<string, string> = { ...forwardedHeaders(req) };
  if (req.headers['content-type']) headers['content-type'] = req.headers['content-type'];
  const types = eventTypesOf(params); // parsed once, for every question below
  const withPresence = featureLevel < FL.LAST_UPDATE_ID && fetchesPresence(types);
  const withUsers = registerNeedsUsers(featureLevel, types); // V1, V3: register/users.ts
  // V3: the legacy settings user_settings is built from, asked for where the client did not.
  const settingTypes = settingTypesToAdd(featureLevel, types);
  const body = settingTypes.length > 0 ? await withFetchTypes(req, raw, types, settingTypes, headers) : raw;
  // P12 in register (feature level 288), which old servers do not know: E3 before the call.
  const historyLimitDays = withPresence
    ? parseJsonInt('presence_history_limit_days', params.get('presence_history_limit_days'))
    : undefined;
  // M1: the mobile app is shown the level the operator chose, where the shim can serve it.
  const shown = levelShownTo(ctx.config.app, req.headers, featureLevel);
  const presenting = shown !== featureLevel;
  if (!withPresence && !withUsers && !presenting) headers['accept-encoding'] = req.headers['accept-encoding'] ?? 'identity';
  // X12: a realm new to the shim keeps presence state once the upstream accepts the caller for
  // it; until then (no credentials: a logged-out visitor's, or refused ones) its presence goes on as it came.
  const keepsPresence = withPresence && hasCredentials(req.headers) && !(await admissionRefused(req, ctx, realm, featureLevel));
  const call = { realm, method: 'POST' as const, path: req.url ?? '/api/v1/register', headers, body };
  // X3: an answer the shim reads ends within the deadline; one passed on streams.
  if (!withPresence && !withUsers && !presenting) {
    const streamed = await timedUpstream(req, () => ctx.client.stream(call));
    f.kind = 'passthrough';
    return relay(res, streamed);
  }
  const r = await timedUpstream(req, () => ctx.client.open(call));
  if (!isSuccess(r.status)) {
    f.kind = 'passthrough';
    return relay(res, r);
  }

  // A reset or a silent upstream mid-answer is E2's, not an internal error.
  const limit = ctx.config.upstream.maxResponseBytes;
  const bounded = await r.readUpTo(limit);
  if (!bounded.whole) {
    // What was not done to it; for M1, the mobile app then sees the answer's own level and
    // refuses a server below 9.0.
    const skipped: string[] = [];
    if (withPresence) skipped.push('presence');
    if (withUsers) skipped.push('user backfill');
    if (presenting) skipped.push("the mobile app's presented level");
    ctx.log.warn(
      { realm: realm.host, limit, skipped },
      `register answer larger than upstream.maxResponseBytes: passed on untouched, ${skipped.join(' and ')} skipped`,
    );
    f.kind = 'passthrough-large';
    return relayBounded(res, r, bounded);
  }
  const started = performance.now();
  const answer = await parseRegisterAnswer(bounded.body);
  await setImmediate(); // a large register answer: let other requests run after parsing it
  // X13: the upstream was upgraded while the shim runs; later requests see its new level.
  const upstreamLevel = answer.zulip_feature_level;
  const answered =
    typeof upstreamLevel === 'number' && Number.isInteger(upstreamLevel) && upstreamLevel > featureLevel ? upstreamLevel : featureLevel;
  if (answered > featureLevel) ctx.featureLevels.raised(realm, answered);
  // M1 on the level the answer itself gives: an upstream just upgraded past the presented level is shown as it is.
  if (presenting) answer.zulip_feature_level = levelShownTo(ctx.config.app, req.headers, answered);
  const sharedOwners = new Map<string, number | undefined>();
  const users = withUsers ? await backfillRegisterUsers(answer, featureLevel, types, sharedOwners, settingTypes) : undefined;
  ctx.users.logAmbiguousBotOwners(realm, sharedOwners); // X10
  if (users?.notBuilt) {
    // W1: never half an object; the client keeps the old-server path it has.
    ctx.log.warn(
      { realm: realm.host, missing: users.notBuilt },
      'register: user_settings left out, the upstream did not send a setting it has',
    );
  }
  const presences = answer.presences;
  const spectator = isSpectators(answer);
  // What the answer gains, named in its headers (V4, W2).
  const added = users ?? noneAdded();
  // M2: what the app's parsers require at the level it is shown, which the upstream does not send.
  if (presenting) {
    editRegister(answer, answered, answer.zulip_feature_level as number);
    addMissing(answer, registerAdditions(answered, answer.zulip_feature_level as number), added);
    addStaticDataUrls(ctx, realm, answer, answered, answer.zulip_feature_level as number, added);
    await startQueueStates(ctx, realm, answer, answered, answer.zulip_feature_level as number);
  }
  if (!withPresence || spectator || !keepsPresence || !presences || typeof presences !== 'object' || Array.isArray(presences)) {
    // No presence of the realm in it (a logged-out visitor's, an upstream that left it out): as
    // it came unless users were filled (V4). A visitor's empty map is nobody's view of the realm
    // (P7): taken in, it would have put every user out of view; answered from the ledger, it
    // would have shown a visitor what Zulip shows only the realm's users. Its presence settings
    // are added all the same (W2), as a modern server sends them to a visitor too.
    if (withPresence && spectator) addMissing(answer, OLD_SERVER_PRESENCE_SETTINGS, added);
    else if (withPresence && !keepsPresence) presenceNotKept(ctx, realm);
    if (added.added.length === 0 && settingTypes.length === 0 && !presenting) return relayBounded(res, r, bounded);
    f.kind = 'register';
    const raw = await serializeRegister(answer);
    await sendEncoded(req, res, r.status, { raw }, { ...rewrittenHeaders(r.headers), ...addedHeaders(added) });
    return;
  }

  const slimAsked = readJsonBool(params.get('slim_presence')) === true;
  // What the upstream sent: 2.1 ignores slim_presence and always answers legacy.
  const format: Format = slimAsked && featureLevel >= FL.SLIM_PRESENCE ? 'slim' : 'legacy';
  const asker: Asker = { ctx, req, realm, era: presenceEra(featureLevel) };
  const serverTimestamp = upstreamTime(answer, r.headers);
  // A register answer shows the realm as the caller sees it: complete where all see the same.
  const complete = everyCallerSeesTheSameUsers(ctx.config.presence.shareSnapshots, featureLevel);
  const dateTimed = typeof answer.server_timestamp !== 'number'; // before feature level 70 (P6)
  const intake = await takeInAnswer(asker, format, presences as Record<string, unknown>, serverTimestamp, complete, dateTimed);

  if (slimAsked && intake.modernError) throw intake.modernError; // no legacy map where modern was asked
  if (slimAsked && intake.modern) {
    // R1: the modern format with both timestamps, also where the upstream ignored the flag.
    const r = await registerPresences(asker, intake, intake.modern, complete, historyLimitDays);
    answer.presences = r.presences;
    answer.presence_last_update_id = r.presenceLastUpdateId;
  } else {
    const cutoff = historyCutoff(historyLimitDays, serverTimestamp);
    if (cutoff !== undefined) answer.presences = limitLegacyHistory(presences as Record<string, unknown>, cutoff);
    const empty = Object.keys(answer.presences as Record<string, unknown>).length === 0;
    answer.presence_last_update_id = await idForLegacyPresences(asker, intake, serverTimestamp, historyLimitDays, empty);
  }
  if (answer.server_timestamp === undefined) answer.server_timestamp = serverTimestamp;
  addMissing(answer, OLD_SERVER_PRESENCE_SETTINGS, added);

  const out = Buffer.from(JSON.stringify(answer));
  f.kind = 'register';
  ctx.log.debug({ bytes: out.length, ms: Math.round(performance.now() - started) }, 'register presence rewritten');
  await sendEncoded(req, res, r.status, { raw: out }, { ...rewrittenHeaders(r.headers), ...addedHeaders(added) });
};
