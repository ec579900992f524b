/**
 * The `route` label of upstream metrics: a small fixed set, never a raw path, so a path with a
 * message id, user id or email in it can never create a new time series.
 */
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

/**
 * The `method` label of client requests: methods with a label of their own; any other (WebDAV,
 * …) counts as `other`, so the series stay bounded.
 */
export const METHOD_LABELS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** Exact API paths (after `/api/v1` or `/json`) with a label of their own. */
const EXACT: ReadonlyMap<string, RouteLabel> = new Map<string, RouteLabel>([
  ['/events', 'events'],
  ['/messages', 'messages'],
  ['/register', 'register'],
  ['/users/me/presence', 'presence'],
  ['/users/me', 'users_me'],
  ['/users', 'users'],
  ['/server_settings', 'server_settings'],
]);

const API_PREFIXES = ['/api/v1/', '/json/'];

/** Maps a request path (query allowed) to its route label. */
export function routeLabel(url: string): RouteLabel {
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  for (const prefix of API_PREFIXES) {
    if (!path.startsWith(prefix)) continue;
    const rest = path.slice(prefix.length - 1);
    const exact = EXACT.get(rest);
    if (exact) return exact;
    // Message sub-resources (/messages/123, /messages/flags, /messages/render, …).
    if (rest.startsWith('/messages/')) return 'messages';
    // One user by id or email (/users/12, /users/iago@zulip.com): never the id in a label.
    if (/^\/users\/[^/]+$/.test(rest)) return 'user';
    return 'other';
  }
  return 'other';
}

/** The `status` label: the HTTP status class, or why there was no answer. */
export type StatusLabel = '1xx' | '2xx' | '3xx' | '4xx' | '5xx' | 'error' | 'timeout';

const STATUS_CLASSES: readonly StatusLabel[] = ['1xx', '2xx', '3xx', '4xx', '5xx'];

/** Every value `statusLabel` gives. */
export const STATUS_LABELS: readonly StatusLabel[] = [...STATUS_CLASSES, 'error', 'timeout'];

/** Runs for every client request and upstream exchange: a table lookup, no string built. */
export function statusLabel(outcome: number | 'error' | 'timeout'): StatusLabel {
  if (typeof outcome !== 'number') return outcome;
  return STATUS_CLASSES[Math.floor(outcome / 100) - 1] ?? 'error';
}
