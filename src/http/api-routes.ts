import type { ApiPrefix } from './api-prefix.js';
import { routingPath } from './routing-path.js';

/**
 * The one table of the Zulip API paths the shim knows: each route's metric label, whether the
 * shim takes it (and by which handler, bound by name in routes.ts), and whether it is a long
 * poll (its own upstream pool, T1). Everything not here is passed through under `other`.
 */

/** The `route` label of request and upstream metrics: a small fixed set, never a raw path. */
export const ROUTE_LABELS = [
  'events',
  'messages',
  'register',
  'presence',
  'users_me',
  'users',
  'user',
  'server_settings',
  'other',
] as const;
export type RouteLabel = (typeof ROUTE_LABELS)[number];

/** The endpoints the shim answers itself; routes.ts binds each to its handler. */
export type InterceptName = 'serverSettings' | 'presence' | 'register' | 'ownProfile' | 'users' | 'user';

export interface ApiRoute {
  /** The path after the prefix; a `{name}` segment matches any one non-empty segment. */
  path: string;
  /** Paths below this one (`/messages/123/reactions`) take the same label, not intercepted. */
  andBelow?: boolean;
  label: RouteLabel;
  /** Intercepted: by method, the handler's name. */
  intercept?: Partial<Record<'GET' | 'POST', InterceptName>>;
  /** Intercepted only under these prefixes (default: both). */
  prefixes?: readonly ApiPrefix[];
  /** GET on it is a long poll (held up to ~90 s by the upstream). */
  longPoll?: boolean;
}

export const API_ROUTES: readonly ApiRoute[] = [
  // Only the API prefix: /json/server_settings does not exist.
  { path: '/server_settings', label: 'server_settings', intercept: { GET: 'serverSettings' }, prefixes: ['/api/v1'] },
  { path: '/users/me/presence', label: 'presence', intercept: { POST: 'presence' } },
  { path: '/register', label: 'register', intercept: { POST: 'register' } },
  // V1: the user object wherever one appears, under both prefixes.
  { path: '/users/me', label: 'users_me', intercept: { GET: 'ownProfile' } },
  { path: '/users', label: 'users', intercept: { GET: 'users' } },
  { path: '/users/{user_id_or_email}', label: 'user', intercept: { GET: 'user' } },
  { path: '/events', label: 'events', longPoll: true },
  { path: '/messages', label: 'messages', andBelow: true },
];

export const API_PREFIXES: readonly ApiPrefix[] = ['/api/v1', '/json'];

interface Match {
  route: ApiRoute;
  prefix: ApiPrefix;
}

/** Segments after the leading `/`; undefined stands for a `{name}` segment. */
const segmentsOf = (path: string) =>
  path
    .slice(1)
    .split('/')
    .map((s) => (/^\{\w+\}$/.test(s) ? undefined : s));

const EXACT = new Map<string, ApiRoute>();
const PATTERNS: Array<{ route: ApiRoute; segments: Array<string | undefined> }> = [];
/** Routes that take the paths below them, each with the prefix those paths start with (`/messages/`). */
const BELOW: Array<{ route: ApiRoute; under: string }> = [];
for (const route of API_ROUTES) {
  if (route.path.includes('{')) PATTERNS.push({ route, segments: segmentsOf(route.path) });
  else EXACT.set(route.path, route);
  if (route.andBelow) BELOW.push({ route, under: `${route.path}/` });
}

/** The API prefix a path (no query) starts with; undefined outside the API. */
const prefixOf = (path: string): ApiPrefix | undefined =>
  path.startsWith('/api/v1/') ? '/api/v1' : path.startsWith('/json/') ? '/json' : undefined;

/** A path (no query) split into its API prefix and the rest (`/messages`); undefined outside the API. */
export function apiPathOf(path: string): { prefix: ApiPrefix; rest: string } | undefined {
  const prefix = prefixOf(path);
  return prefix && { prefix, rest: path.slice(prefix.length) };
}

/**
 * Does `path` (from `at`, just after a `/`) have exactly these segments, a `{name}` one matching
 * any non-empty segment? Read in place: no array made for a path that matches no pattern.
 */
function matchesSegments(path: string, at: number, segments: ReadonlyArray<string | undefined>): boolean {
  for (let i = 0; i < segments.length; i++) {
    const slash = path.indexOf('/', at);
    // Every segment but the last ends at a slash; the last ends the path.
    const last = i === segments.length - 1;
    if (last === slash >= 0) return false;
    const end = slash < 0 ? path.length : slash;
    const s = segments[i];
    if (s === undefined ? end === at : end - at !== s.length || !path.startsWith(s, at)) return false;
    at = end + 1;
  }
  return true;
}

/**
 * The route of a path (no query), and the prefix it came under; undefined for a path outside
 * the API or not in the table. Runs on every request: a map lookup for most paths, else a
 * reading in place (bench B4).
 */
export function apiRouteOf(path: string): Match | undefined {
  const prefix = prefixOf(path);
  if (!prefix) return undefined;
  const exact = EXACT.get(path.slice(prefix.length));
  if (exact) return { route: exact, prefix };
  for (const p of PATTERNS) if (matchesSegments(path, prefix.length + 1, p.segments)) return { route: p.route, prefix };
  for (const b of BELOW) if (path.startsWith(b.under, prefix.length)) return { route: b.route, prefix };
  return undefined;
}

/** What the table says of one request, asked once for it (routes.ts) and handed on. */
export interface RouteFacts {
  /** The endpoint the shim answers itself, if any. */
  intercept: InterceptName | undefined;
  /** Its metrics label. */
  label: RouteLabel;
  /** A long poll: its own upstream pool (T1). */
  longPoll: boolean;
}

/** The facts of a path the table does not name (passed through, counted as `other`). */
export const NOT_IN_TABLE: RouteFacts = Object.freeze({ intercept: undefined, label: 'other', longPoll: false });

/** The table's facts for a method and a path (no query; as the upstream's router sees it). */
export function routeFactsOf(method: string, path: string): RouteFacts {
  const m = apiRouteOf(path);
  if (!m) return NOT_IN_TABLE;
  const taken = !m.route.prefixes || m.route.prefixes.includes(m.prefix);
  return {
    intercept: taken ? m.route.intercept?.[method as 'GET' | 'POST'] : undefined,
    label: m.route.label,
    longPoll: method === 'GET' && m.route.longPoll === true,
  };
}

/**
 * A request target's route label, for a request not routed by routes.ts (the shim's own calls,
 * the recorder's): read on the path the upstream's router sees, as routes.ts reads it.
 */
export function routeLabel(target: string): RouteLabel {
  return routeFactsOf('GET', routingPath(target)).label;
}

/** Whether an upstream request is a long poll (its own pool), for one not routed by routes.ts; the same reading. */
export function isLongPoll(method: string, target: string): boolean {
  return routeFactsOf(method, routingPath(target)).longPoll;
}
