import type { Handler } from './context.js';
import { presenceHandler } from './presence/handler.js';
import { registerHandler } from './register/handler.js';
import { ownProfileHandler } from './profile/handler.js';
import { userHandler, usersHandler } from './profile/users-handler.js';
import { serverSettingsHandler } from './server-settings.js';

/**
 * The intercepted endpoints: method + path (no query). Everything not listed here, and not
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

/**
 * The handler of an intercepted endpoint, or undefined (pass-through). An exact path wins over
 * a `{name}` segment, which matches any one non-empty segment.
 */
export function interceptedHandler(method: string | undefined, path: string): Handler | undefined {
  const exact = INTERCEPTED.get(`${method} ${path}`);
  if (exact) return exact;
  const segments = path.split('/');
  for (const [key, handler] of INTERCEPTED) {
    const [m, pattern] = key.split(' ') as [string, string];
    if (m !== method || !pattern.includes('{')) continue;
    const want = pattern.split('/');
    if (want.length === segments.length && want.every((w, i) => (/^\{\w+\}$/.test(w) ? segments[i] !== '' : w === segments[i])))
      return handler;
  }
  return undefined;
}
