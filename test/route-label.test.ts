import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { API_PREFIXES, API_ROUTES, ROUTE_LABELS, apiRouteOf, routeLabel } from '../src/http/api-routes.js';
import { statusLabel } from '../src/observability/route-label.js';

/**
 * The route and status labels of the metrics: a fixed, small set whatever paths and statuses
 * clients send, so no label set grows with traffic.
 */

describe('routeLabel', () => {
  it.each([
    ['/api/v1/events', 'events'],
    ['/json/events', 'events'],
    ['/api/v1/events?queue_id=1:2&last_event_id=5', 'events'],
    ['/api/v1/messages', 'messages'],
    ['/json/messages', 'messages'],
    ['/api/v1/messages/12345', 'messages'],
    ['/api/v1/messages/12345/reactions', 'messages'],
    ['/json/messages/flags', 'messages'],
    ['/api/v1/messages?anchor=newest&num_before=100', 'messages'],
    ['/api/v1/register', 'register'],
    ['/json/register', 'register'],
    ['/api/v1/users/me/presence', 'presence'],
    ['/json/users/me/presence', 'presence'],
    ['/api/v1/users/me', 'users_me'],
    ['/api/v1/users/me?include_subscribers=false', 'users_me'],
    ['/json/users/me', 'users_me'],
    ['/api/v1/users', 'users'],
    ['/api/v1/users?client_gravatar=true', 'users'],
    ['/api/v1/server_settings', 'server_settings'],
    ['/json/server_settings', 'server_settings'],
    // Everything else, and anything carrying an id or an email in its path, is "other".
    ['/api/v1/users/me/subscriptions', 'other'],
    ['/api/v1/users/me/presence/extra', 'other'],
    // One user by id or email (V1): one label, never the id or the email.
    ['/api/v1/users/17', 'user'],
    ['/json/users/someone@example.com?client_gravatar=true', 'user'],
    ['/api/v1/users/someone@example.com', 'user'],
    ['/api/v1/users/17/presence', 'other'],
    ['/api/v1/realm/presence', 'other'],
    ['/api/v1/messagesx', 'other'],
    ['/api/v1/events/', 'other'],
    ['/api/v2/events', 'other'],
    ['/events', 'other'],
    ['/user_uploads/2/ab/file.png', 'other'],
    ['/static/webpack-bundles/app.js', 'other'],
    ['/', 'other'],
    ['', 'other'],
    // An absolute-form target is read as its path, as the router reads it (routes.ts).
    ['http://chat.example.com/api/v1/events', 'events'],
    ['/test/echo', 'other'],
  ])('%s → %s', (path, label) => {
    expect(routeLabel(path)).toBe(label);
  });

  it('only ever returns one of the declared labels', () => {
    const samples = ['/api/v1/x', '/json/users/me/x', '/api/v1/messages/1/2/3', '/a?b=/api/v1/events', '/json/'];
    for (const s of samples) expect(ROUTE_LABELS).toContain(routeLabel(s));
  });
});

describe('statusLabel', () => {
  it.each([
    [101, '1xx'],
    [200, '2xx'],
    [204, '2xx'],
    [302, '3xx'],
    [401, '4xx'],
    [429, '4xx'],
    [502, '5xx'],
    [599, '5xx'],
    [0, 'error'],
    [99, 'error'],
    [600, 'error'],
    [999, 'error'],
    ['error', 'error'],
    ['timeout', 'timeout'],
  ] as const)('%s → %s', (outcome, label) => {
    expect(statusLabel(outcome)).toBe(label);
  });
});

describe('apiRouteOf', () => {
  /** The table read the plain way: the path split into segments and compared with each route's. */
  function byTheTable(path: string) {
    const prefix = API_PREFIXES.find((p) => path.startsWith(`${p}/`));
    if (!prefix) return undefined;
    const rest = path.slice(prefix.length);
    const segments = rest.slice(1).split('/');
    const matches = (route: (typeof API_ROUTES)[number]) => {
      const want = route.path.slice(1).split('/');
      return want.length === segments.length && want.every((w, i) => (w.startsWith('{') ? segments[i] !== '' : w === segments[i]));
    };
    const route =
      API_ROUTES.find((r) => !r.path.includes('{') && r.path === rest) ??
      API_ROUTES.find((r) => r.path.includes('{') && matches(r)) ??
      API_ROUTES.find((r) => r.andBelow && rest.startsWith(`${r.path}/`));
    return route && { route, prefix };
  }

  it.each([
    ['/api/v1/users/17', 'user'],
    ['/api/v1/users/', undefined],
    ['/api/v1/users//', undefined],
    ['/api/v1/users/17/', undefined],
    ['/json/users/me', 'users_me'],
    ['/api/v1/messages/', 'messages'],
    ['/api/v1/messagesx/1', undefined],
    ['/api/v1', undefined],
    ['/api/v2/users', undefined],
  ] as const)('%s → %s', (path, label) => {
    expect(apiRouteOf(path)?.route.label).toBe(label);
  });

  it('reads every path as the table says, segment by segment', () => {
    const segment = fc.constantFrom('api', 'v1', 'json', 'users', 'me', 'presence', 'messages', 'events', '17', 'a@b.c', '', 'x');
    fc.assert(
      fc.property(fc.constantFrom('/api/v1/', '/json/', '/api/', '/'), fc.array(segment, { maxLength: 5 }), (prefix, segments) => {
        const path = prefix + segments.join('/');
        expect(apiRouteOf(path)).toEqual(byTheTable(path));
      }),
      { numRuns: 5000 },
    );
  });
});
