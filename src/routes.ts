import type { Handler } from './context.js';
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

/**
 * The intercepted endpoints: method + path (no query). A `{name}` segment matches any one
 * non-empty segment; an exact path wins over a pattern. Everything not listed here, and not
 * one of the shim's own paths, is passed through (T1).
 */
export const INTERCEPTED: ReadonlyMap<string, Handler> = new Map<string, Handler>([
  ['GET /api/v1/server_settings', serverSettingsHandler],
  ['POST /api/v1/users/me/presence', presenceHandler],
  ['POST /json/users/me/presence', presenceHandler],
  ['POST /api/v1/register', registerHandler],
  ['POST /json/register', registerHandler],
  ['GET /api/v1/users/me', ownProfileHandler],
  // V1: the user object wherever one appears, under both prefixes.
  ['GET /json/users/me', ownProfileHandler],
  ['GET /api/v1/users', usersHandler],
  ['GET /json/users', usersHandler],
  ['GET /api/v1/users/{user_id_or_email}', userHandler],
  ['GET /json/users/{user_id_or_email}', userHandler],
]);

export type Route =
  | { kind: 'own'; path: OwnPath }
  | { kind: 'intercepted'; path: string; handler: Handler }
  | { kind: 'upstream'; path: string };

interface Pattern {
  /** The literal text before the first `{name}` segment: a path that lacks it cannot match. */
  prefix: string;
  /** Segments after the leading `/`; undefined stands for a `{name}` segment. */
  segments: Array<string | undefined>;
  handler: Handler;
}

interface Compiled {
  /** By method, then exact path. */
  exact: Map<string, Map<string, Handler>>;
  /** By method. */
  patterns: Map<string, Pattern[]>;
}

function compile(table: ReadonlyMap<string, Handler>): Compiled {
  const exact = new Map<string, Map<string, Handler>>();
  const patterns = new Map<string, Pattern[]>();
  for (const [key, handler] of table) {
    const [method, path] = key.split(' ') as [string, string];
    const brace = path.indexOf('{');
    if (brace < 0) {
      if (!exact.has(method)) exact.set(method, new Map());
      exact.get(method)!.set(path, handler);
      continue;
    }
    if (!patterns.has(method)) patterns.set(method, []);
    patterns.get(method)!.push({
      prefix: path.slice(0, brace),
      segments: path
        .slice(1)
        .split('/')
        .map((s) => (/^\{\w+\}$/.test(s) ? undefined : s)),
      handler,
    });
  }
  return { exact, patterns };
}

const compiled = compile(INTERCEPTED);
const OWN: ReadonlySet<string> = new Set(OWN_PATHS);
const NO_PATTERNS: readonly Pattern[] = [];

/**
 * The route of a request: its method and its request target as sent. Runs on every request, so
 * it allocates nothing for a pass-through path that no pattern's literal prefix fits.
 */
export function routeOf(method: string | undefined, target: string | undefined): Route {
  const path = routingPath(target ?? '/');
  if (OWN.has(path)) return { kind: 'own', path: path as OwnPath };
  const exact = compiled.exact.get(method ?? '')?.get(path);
  if (exact) return { kind: 'intercepted', path, handler: exact };
  let segments: string[] | undefined;
  for (const p of compiled.patterns.get(method ?? '') ?? NO_PATTERNS) {
    if (!path.startsWith(p.prefix)) continue;
    segments ??= path.slice(1).split('/');
    if (matches(p.segments, segments)) return { kind: 'intercepted', path, handler: p.handler };
  }
  return { kind: 'upstream', path };
}

/** Does a path's segments fit a pattern's (undefined: any one non-empty segment)? */
function matches(pattern: ReadonlyArray<string | undefined>, segments: readonly string[]): boolean {
  if (pattern.length !== segments.length) return false;
  for (let i = 0; i < pattern.length; i++) {
    const want = pattern[i];
    if (want === undefined ? segments[i] === '' : want !== segments[i]) return false;
  }
  return true;
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
