import type { EndpointHandler, ShimContext } from './context.js';
import { timedUpstream } from './observability/request-facts.js';
import { sendJson } from './http/errors.js';
import { isSuccess, relayBuffered, rewrittenHeaders } from './upstream/relay.js';
import { forwardedHeaders, parseJsonObject } from './upstream/client.js';
import { featureLevelOf } from './upstream/feature-level.js';
import { realmOf } from './upstream/realm.js';
import { VERSION } from './version.js';
import { APP_SERVED_FROM, appLevelFor, presentedLevel, unservableReason } from './app/presented.js';
import { emulatedFeatures } from './changes/index.js';

/** What the server_settings handler uses of the shim. */
export type ServerSettingsContext = Pick<ShimContext, 'config' | 'log' | 'upstreamId' | 'client' | 'featureLevels'>;

/** What the shim adds for an upstream at this feature level (T2): one filter over the registry of changes. */
export { emulatedFeatures };

/**
 * T2: `GET /api/v1/server_settings` passes through with one added top-level field,
 * `zulip_compat_shim`; `zulip_feature_level` is changed only for the mobile app with
 * `app.featureLevel` on (M1). The answer also primes the
 * feature-level cache.
 */
export const serverSettingsHandler: EndpointHandler<ServerSettingsContext> = async (req, res, ctx) => {
  const realm = realmOf(ctx.upstreamId, req.headers);
  const r = await timedUpstream(req, () =>
    ctx.client.fetch({ realm, method: 'GET', path: req.url ?? '/api/v1/server_settings', headers: forwardedHeaders(req) }),
  );
  if (!isSuccess(r.status)) return relayBuffered(res, r);
  const settings = parseJsonObject(r.body);
  ctx.featureLevels.observe(realm, settings);
  const real = featureLevelOf(settings);
  const shim: Record<string, unknown> = { version: VERSION, emulated: emulatedFeatures(real) };
  settings.zulip_compat_shim = shim;
  // M1: the mobile app is shown the level the operator chose, where the shim can serve it; the
  // answer says both.
  const asked = appLevelFor(ctx.config.app, req.headers);
  if (asked !== undefined) {
    const shown = presentedLevel(asked, real);
    settings.zulip_feature_level = shown;
    shim.app = { presented_feature_level: shown, feature_level: real };
    // M1: judged at start-up (exit 2) only when the upstream answered then; said here once.
    if (shown < asked && ctx.featureLevels.firstFoundBelow(APP_SERVED_FROM)) {
      ctx.log.warn(
        { featureLevel: real, appFeatureLevel: asked },
        `app: ${unservableReason(asked, real)}: the mobile app is shown the real level and refuses the server`,
      );
    }
  }
  sendJson(res, r.status, settings, rewrittenHeaders(r.headers));
};
