import type { ApiChange } from './types.js';

/**
 * Feature level 171 (Zulip 7.0): POST /fetch_api_key answers with `user_id`. An older server
 * says only `email` and `api_key`; the own user's id is what GET /users/me answers with that
 * key, which the app itself asked below 171 (and whose parsers at its server-7 sweep require it).
 */
export const fetchApiKeyUserId: ApiChange = {
  featureLevel: 171,
  feature: 'fetch_api_key_user_id',
  lookup: { endpoint: 'POST /fetch_api_key', field: 'user_id', lookup: 'own_user_id' },
};
