import type { EndpointHandler } from './context.js';
import { API_PREFIXES, API_ROUTES, routeFactsOf, type InterceptName, type RouteLabel } from './http/api-routes.js';
import { presenceHandler } from './presence/handler.js';
import { registerHandler } from './register/handler.js';
import { ownProfileHandler } from './profile/handler.js';
import { userHandler, usersHandler } from './profile/users-handler.js';
import { serverSettingsHandler } from './server-settings.js';

/**
 * Which part of the shim takes a request, decided once, on the path the upstream's own router
 * would see (X6): the shim's own paths, an intercepted endpoint, or the pass-through (T1).
 */

/** The shim's own paths: answered here whatever the `Host`, never passed on. */
export const OWN_PATHS = ['/healthz', '/readyz', '/metrics'] as const;
export type OwnPath = (typeof OWN_PATHS)[number];

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

/**
 * The path a Zulip server's router sees for a request target (X6), as its nginx hands it to
 * Django: the path of an absolute-form target, without query or fragment, percent-decoded once,
 * with repeated slashes merged and dot segments removed (RFC 3986 §5.2.4). So
 * `/api/v1/users/%2e%2e/users/me` and `/api/v1//users/me` both route as `/api/v1/users/me`.
 * The result holds one character per decoded byte (latin1), which is all a route needs.
 */
export function routingPath(target: string): string {
  let path = target;
  const scheme = path.startsWith('/') ? null : /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i.exec(path);
  if (scheme) path = path.slice(scheme[0].length);
  const query = path.indexOf('?');
  if (query >= 0) path = path.slice(0, query);
  const fragment = path.indexOf('#');
  if (fragment >= 0) path = path.slice(0, fragment);
  // Most paths need none of the steps below: each runs only where its character is present.
  if (path.includes('%')) path = path.replace(/%([0-9a-f]{2})/gi, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
  if (!path.startsWith('/')) path = `/${path}`;
  if (path.includes('//')) path = path.replace(/\/{2,}/g, '/');
  return path.includes('/.') ? removeDotSegments(path) : path;
}

/** RFC 3986 §5.2.4, for an absolute path. */
export function removeDotSegments(path: string): string {
  const out: string[] = [];
  const segments = path.split('/').slice(1);
  for (const [i, s] of segments.entries()) {
    const last = i === segments.length - 1;
    if (s === '.' || s === '..') {
      if (s === '..') out.pop();
      // A trailing dot segment leaves the path ending in a slash (`/a/b/..` → `/a/`).
      if (last) out.push('');
    } else out.push(s);
  }
  return `/${out.join('/')}`;
}

/** A routing path as a request target again: every byte outside RFC 3986 `pchar` and `/` encoded. */
export function encodePath(path: string): string {
  return path.replace(/[^A-Za-z0-9\-._~!$&'()*+,;=:@/]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
}
