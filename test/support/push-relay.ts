import { send, type Answer } from './http-client.js';
import { registerSecret } from './secrets.js';

/** M7: what the tests of the push relay share: the server's bouncer credentials, and its calls. */

export const NOTIFY = '/api/v1/remotes/push/notify';

/** The old server's `zulip_org_id` and `zulip_org_key` (its /etc/zulip/zulip-secrets.conf). */
export const ORG_ID = registerSecret('5d8a9b2e-7c41-4e0f-9a63-org-id-0045');
export const ORG_KEY = registerSecret('zcs-push-org-key-Xq7vT2pLm9KdR4sW8bNc');
/** HTTP Basic, as the server's `requests` sends it. */
export const SERVER_AUTH = `Basic ${Buffer.from(`${ORG_ID}:${ORG_KEY}`).toString('base64')}`;

/** The headers a Zulip server's `send_to_push_bouncer` sends (requests' own, its User-Agent, the JSON type). */
export function serverHeaders(version = '8.0', contentType = 'application/json'): Record<string, string> {
  return {
    'user-agent': `ZulipServer/${version}`,
    'accept-encoding': 'gzip, deflate',
    accept: '*/*',
    connection: 'keep-alive',
    authorization: SERVER_AUTH,
    'content-type': contentType,
  };
}

/** A call of the server's to the relay (or to anything at `base`). */
export function serverCall(base: string, method: string, path: string, body?: Buffer, headers = serverHeaders()): Promise<Answer> {
  return send(base, { method, path, headers, ...(body ? { body } : {}) }, { timeoutMs: 15_000 });
}

/** A notify body as the server serialises it (orjson: compact, UTF-8). */
export const bytesOf = (json: unknown): Buffer => Buffer.from(JSON.stringify(json));
