import type { EndpointHandler } from './context.js';
import { API_PREFIXES, API_ROUTES, routeFactsOf, type InterceptName, type RouteLabel } from './http/api-routes.js';
import { OWN_PATHS, type OwnPath } from './http/own-paths.js';
import { routingPath } from './http/routing-path.js';
import { presenceHandler } from './presence/handler.js';
import { registerHandler } from './register/handler.js';
import { ownProfileHandler } from './profile/handler.js';
import { userHandler, usersHandler } from './profile/users-handler.js';
import { serverSettingsHandler } from './server-settings.js';

/**
 * Which part of the shim takes a request, decided once, on the path the upstream's own router
 * would see (X6): the shim's own paths, an intercepted endpoint, or the pass-through (T1).
 */

/** The shim's own paths (http/own-paths.ts): answered here whatever the `Host`, never passed on. */
export { OWN_PATHS, type OwnPath } from './http/own-paths.js';

/** The handler of each endpoint the shim answers itself (http/api-routes.ts names them). */
const HANDLERS: Readonly<Record<InterceptName, EndpointHandler>> = {
  serverSettings: serverSettingsHandler,
  presence: presenceHandler,
  register: registerHandler,
  ownProfile: ownProfileHandler,
  users: usersHandler,
  user: userHandler,
};

/**
 * The intercepted endpoints as `METHOD /prefix/path` → handler, read from the one route table
 * (API_ROUTES). Everything not listed here, and not one of the shim's own paths, is passed
 * through (T1).
 */
export const INTERCEPTED: ReadonlyMap<string, EndpointHandler> = new Map(
  API_ROUTES.flatMap((route) =>
    Object.entries(route.intercept ?? {}).flatMap(([method, name]) =>
      (route.prefixes ?? API_PREFIXES).map((prefix): [string, EndpointHandler] => [`${method} ${prefix}${route.path}`, HANDLERS[name]]),
    ),
  ),
);

/**
 * Where a request goes, with what the rest of its way needs to know of its route (decided here
 * once): its metrics label (request log, upstream metrics) and whether it is a long poll (the
 * upstream pool it takes).
 */
export type Route = (
  | { kind: 'own'; path: OwnPath }
  | { kind: 'intercepted'; path: string; handler: EndpointHandler }
  | { kind: 'upstream'; path: string }
) & { label: RouteLabel; longPoll: boolean };

const OWN: ReadonlySet<string> = new Set(OWN_PATHS);

/** The route of a request: its method and its request target as sent. Runs once a request. */
export function routeOf(method: string | undefined, target: string | undefined): Route {
  const path = routingPath(target ?? '/');
  if (OWN.has(path)) return { kind: 'own', path: path as OwnPath, label: 'other', longPoll: false };
  const { intercept, label, longPoll } = routeFactsOf(method ?? '', path);
  return intercept
    ? { kind: 'intercepted', path, handler: HANDLERS[intercept], label, longPoll }
    : { kind: 'upstream', path, label, longPoll };
}

/** A routing path as a request target again: every byte outside RFC 3986 `pchar` and `/` encoded. */
export function encodePath(path: string): string {
  return path.replace(/[^A-Za-z0-9\-._~!$&'()*+,;=:@/]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
}
