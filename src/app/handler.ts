import { endpointKey, TRANSLATED_ENDPOINTS, translateRequest } from '../changes/index.js';
import type { EndpointHandler } from '../context.js';
import { isFormEncoded, readBody } from '../http/body.js';
import { apiPathOf } from '../http/api-routes.js';
import { recordFacts, timedUpstream } from '../observability/request-facts.js';
import { forwardedHeaders } from '../upstream/client.js';
import { realmOf } from '../upstream/realm.js';
import { relay } from '../upstream/relay.js';
import { appLevelFor, levelShownTo } from './presented.js';

/** The request changes' name of an endpoint (changes/index.ts endpointKey); undefined outside the API. */
export function endpointOf(method: string | undefined, path: string): string | undefined {
  const at = apiPathOf(path);
  return at && endpointKey(method ?? '', at.rest);
}

/**
 * M2: is this a request of the app that a request change may apply to? (Decided before the
 * upstream's level is known.) Runs on every passed-through request: with the flag off, one test.
 */
export function isTranslatedAppRequest(
  app: Parameters<typeof appLevelFor>[0],
  req: { method?: string | undefined; headers: Parameters<typeof appLevelFor>[1] },
  path: string,
): boolean {
  if (app.featureLevel === undefined || appLevelFor(app, req.headers) === undefined) return false;
  const endpoint = endpointOf(req.method, path);
  return endpoint !== undefined && TRANSLATED_ENDPOINTS.has(endpoint);
}

/**
 * M2, requests down: an app request (shown a higher level than the upstream has) in the form the
 * upstream knows, then its answer passed on as it comes. A body that is not form-encoded (a
 * multipart upload) goes on as it came.
 */
export const appRequestHandler: EndpointHandler = async (req, res, ctx) => {
  const hostRealm = realmOf(ctx.upstreamId, req.headers);
  const { featureLevel: real } = await timedUpstream(req, () => ctx.featureLevels.resolve(hostRealm));
  const shown = levelShownTo(ctx.config.app, req.headers, real);
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q < 0 ? url : url.slice(0, q);
  const endpoint = endpointOf(req.method, path) ?? '';
  // Only a translated endpoint's request comes here (isTranslatedAppRequest): GET, POST or PATCH.
  const method = req.method as 'GET' | 'POST' | 'PATCH';
  const headers: Record<string, string> = { ...forwardedHeaders(req), 'accept-encoding': req.headers['accept-encoding'] ?? 'identity' };
  let target = url;
  let body: Buffer | string | undefined;
  if (method === 'GET') {
    const params = new URLSearchParams(q < 0 ? '' : url.slice(q + 1));
    if (translateRequest(endpoint, params, real, shown, headers)) target = `${path}?${params}`;
  } else {
    body = await readBody(req, ctx.config.server.bodyLimitBytes);
    const type = req.headers['content-type'] ?? '';
    if (type) headers['content-type'] = type;
    if (shown > real && isFormEncoded(type)) {
      const params = new URLSearchParams(body.toString('utf8'));
      if (translateRequest(endpoint, params, real, shown, headers)) body = params.toString();
    }
  }
  recordFacts(req).kind = target !== url || typeof body === 'string' ? 'app-translated' : 'passthrough';
  const r = await timedUpstream(req, () => ctx.client.stream({ realm: hostRealm, method, path: target, headers, body }));
  return relay(res, r);
};
