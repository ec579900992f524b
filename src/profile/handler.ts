import type { EndpointHandler, ShimContext } from '../context.js';
import { recordChanges, recordFacts, timedUpstream } from '../observability/request-facts.js';
import { sendJson } from '../http/errors.js';
import { isRefused, isSuccess, relayBuffered, rewrittenHeaders } from '../upstream/relay.js';
import { forwardedHeaders, parseJsonObject } from '../upstream/client.js';
import { realmOf, type Realm } from '../upstream/realm.js';
import { applyChanges, changeIdsOfFields, MODERN_USER_OBJECTS_LEVEL, needsOf, pendingChanges } from '../changes/index.js';
import { addedHeaders, FALLBACK_HEADER } from '../changes/added-headers.js';
import { lookUp, type LookupContext } from './lookups.js';

/** What the own-profile handler uses of the shim: the upstream, who callers are, and the lookups. */
export type ProfileContext = Pick<ShimContext, 'log' | 'upstreamId' | 'client' | 'featureLevels' | 'admission' | 'callers'> & LookupContext;

/** U5: GET /users/me takes no parameters, so every query parameter sent is listed, sorted. Pure. */
export function ignoredParameters(url: string | undefined): string[] {
  const q = url?.indexOf('?') ?? -1;
  if (!url || q < 0) return [];
  return [...new Set(new URLSearchParams(url.slice(q + 1)).keys())].sort();
}

/**
 * The realm's feature level for a user-object answer, or 0 when unknown: every change then
 * runs, and each adds only what is missing (U1).
 */
export function levelOrZero(ctx: ProfileContext, hostRealm: Realm): Promise<{ realm: Realm; featureLevel: number }> {
  // X12: the realm the upstream serves for this Host keys the lookups.
  const unknown = (err: unknown) => {
    ctx.log.warn({ realm: hostRealm.host, err }, 'user objects: feature level unknown, checking every field');
    return { realm: hostRealm, featureLevel: 0 };
  };
  return ctx.featureLevels
    .resolve(hostRealm)
    .then((r) => (isRefused(r) ? unknown(new Error(`server_settings answered HTTP ${r.refused.status}`)) : r), unknown);
}

/**
 * `GET /api/v1/users/me` answered like a modern server (U1–U5): the upstream's answer, plus
 * the fields its feature level lacks, each from the version change that introduced it.
 */
export const ownProfileHandler: EndpointHandler<ProfileContext> = async (req, res, ctx) => {
  const hostRealm = realmOf(ctx.upstreamId, req.headers);
  const headers = forwardedHeaders(req);
  const f = recordFacts(req);
  f.realm = hostRealm.host;
  f.kind = 'own_profile';
  // server_settings needs no credentials, so it is asked alongside the caller's own call.
  const level = levelOrZero(ctx, hostRealm);
  const r = await timedUpstream(req, () =>
    ctx.client.fetch({ realm: hostRealm, method: 'GET', path: req.url ?? '/api/v1/users/me', headers }),
  );
  if (!isSuccess(r.status)) return relayBuffered(res, r); // E1
  const upstream = parseJsonObject(r.body);
  const { realm, featureLevel } = await level;
  f.featureLevel = featureLevel;
  // X12: the upstream accepted the caller: a realm new to the shim is taken on before its lookups.
  await ctx.admission.accepted(req, realm, featureLevel);
  // Who the caller is, for a GET /users that follows (it needs the id where addresses are hidden).
  if (featureLevel < MODERN_USER_OBJECTS_LEVEL) ctx.callers.remember(realm, req.headers, upstream);

  const changes = pendingChanges(featureLevel, upstream);
  const userId = upstream.user_id;
  // Lookups are keyed by the user id the upstream just vouched for, never by a credential (P13).
  const found =
    changes.length > 0 && typeof userId === 'number' && Number.isInteger(userId)
      ? await timedUpstream(req, () => lookUp(ctx, needsOf(changes), realm, userId, headers))
      : {};
  const { user, added, sources } = applyChanges(upstream, changes, found);
  recordChanges(req, changeIdsOfFields(added));

  const ignored = ignoredParameters(req.url);
  if (ignored.length > 0 && !('ignored_parameters_unsupported' in user)) {
    user.ignored_parameters_unsupported = ignored; // U5
    added.push('ignored_parameters_unsupported');
  }
  if (added.length === 0) return relayBuffered(res, r); // nothing to add: the upstream's bytes (U1)

  const out = addedHeaders({ added, sources });
  if (out[FALLBACK_HEADER]) ctx.log.debug({ realm: realm.host, fields: out[FALLBACK_HEADER] }, 'own profile: documented fallbacks used');
  sendJson(res, r.status, user, { ...rewrittenHeaders(r.headers), ...out });
};
