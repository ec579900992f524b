import type { IncomingHttpHeaders } from 'node:http';
import type { Config } from '../config/index.js';

/**
 * M1: the Zulip mobile app (zulip-flutter) refuses servers below feature level 277. With
 * `app.featureLevel` set, a request whose User-Agent starts with one of `app.userAgents` is
 * shown that level in server_settings and register, and the API changes between the upstream's
 * real level and it are translated (the request parts of changes/index.ts). Everyone else sees the real level.
 */

/**
 * The lowest real level the translations serve from: Zulip 5.0. Below it the app's register and
 * events miss more than is translated (docs/mobile-app.md §8), so an older server is shown its
 * real level, as without the shim.
 */
export const APP_SERVED_FROM = 122;
/** The Zulip release APP_SERVED_FROM is the feature level of, as the start-up error names it. */
export const APP_SERVED_FROM_VERSION = '5.0';

/** The level to show this request's client, if it is the app and the flag is on. */
export function appLevelFor(app: Config['app'], headers: IncomingHttpHeaders): number | undefined {
  if (app.featureLevel === undefined) return undefined;
  const agent = headers['user-agent'] ?? '';
  return app.userAgents.some((prefix) => agent.startsWith(prefix)) ? app.featureLevel : undefined;
}

/** What the app is shown for an upstream at `real`: the presented level, or the real one when the shim cannot serve it. */
export function presentedLevel(presented: number, real: number): number {
  return real >= APP_SERVED_FROM && real < presented ? presented : real;
}

/** The level this request's client is shown for an upstream at `real` (M1): the app's presented level where it applies, else the real one. */
export function levelShownTo(app: Config['app'], headers: IncomingHttpHeaders, real: number): number {
  const asked = appLevelFor(app, headers);
  return asked === undefined ? real : presentedLevel(asked, real);
}

/** M1: why the app cannot be shown `appLevel` in front of a server at `real` (below APP_SERVED_FROM). */
export function unservableReason(appLevel: number, real: number): string {
  return `--app-feature-level ${appLevel} cannot be served by a server at feature level ${real} (Zulip ${APP_SERVED_FROM_VERSION}, feature level ${APP_SERVED_FROM}, or later is needed)`;
}
