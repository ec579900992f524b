import type { Handler } from './context.js';
import { presenceHandler } from './presence/handler.js';
import { registerHandler } from './register/handler.js';
import { ownProfileHandler } from './profile/handler.js';
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
]);
