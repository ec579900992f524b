/**
 * Zulip serves its API under two prefixes that authenticate differently: `/api/v1` (an API key,
 * HTTP Basic) and `/json` (the web app's session cookie; `/api/v1` refuses it). The one place
 * where the shim decides which prefix a call of its own uses.
 */
export type ApiPrefix = '/api/v1' | '/json';

/**
 * The prefix a client called under: a call the shim makes in the client's place (its presence
 * report, its own `GET /users/me`) goes under the same, so the upstream checks the same
 * credentials the same way.
 */
export function apiPrefixOf(url: string | undefined): ApiPrefix {
  return url?.startsWith('/json/') ? '/json' : '/api/v1';
}

/**
 * The prefix for a lookup the shim makes with a caller's credentials outside any call of the
 * caller's (a user list, a register for a delivery email): `/api/v1` with an API key, else
 * `/json`, where a session cookie is accepted.
 */
export function apiPrefixFor(headers: { authorization?: string | undefined }): ApiPrefix {
  return headers.authorization ? '/api/v1' : '/json';
}
