import { timedUpstream } from '../observability/request-facts.js';
import { encodeForm } from '../http/body.js';
import { forwardedHeaders, type ArrivingResponse, type BufferedResponse, type UpstreamCall } from '../upstream/client.js';
import { FL } from '../upstream/feature-level.js';
import type { Asker } from './context.js';
import { fetchFullPresence } from './intake.js';
import type { PresenceRequest } from './params.js';
import { apiPrefixOf } from '../http/api-prefix.js';

/**
 * The caller's own presence report to the upstream (P9: every caller's status reaches it), as a
 * `ping_only` call when the answer comes from a shared snapshot, or as the full fetch itself.
 */

/** A presence poll on an upstream below feature level 263. */
export interface Poll extends Asker {
  featureLevel: number;
  request: PresenceRequest;
}

/** The caller's own report as the client made it, or as a ping (`ping_only: 'true'`), read whole. */
export async function report(
  poll: Poll,
  extra: { ping_only?: string | undefined; slim_presence?: string | undefined },
): Promise<BufferedResponse> {
  if (extra.ping_only === 'false') {
    const r = await fullReport(poll, extra.slim_presence);
    return { status: r.status, headers: r.headers, body: await timedUpstream(poll.req, () => r.body) };
  }
  return timedUpstream(poll.req, () => poll.ctx.client.fetch(reportCall(poll, extra)));
}

/**
 * The caller's own report as the full fetch (`ping_only=false`), resolved at the upstream's
 * head (P9: accepted or not); the body, whose time counts as upstream time once awaited,
 * grows with the realm and has its own budget (B7).
 */
export function fullReport(poll: Poll, slimPresence: string | undefined): Promise<ArrivingResponse> {
  const call = reportCall(poll, { ping_only: 'false', slim_presence: slimPresence });
  return timedUpstream(poll.req, () => fetchFullPresence(poll, call));
}

/** The report, form-encoded, with only parameters the upstream knows. */
function reportCall(poll: Poll, extra: { ping_only?: string | undefined; slim_presence?: string | undefined }): UpstreamCall {
  const { request, req, realm } = poll;
  const form: Array<[string, string]> = [];
  const status = request.raw.get('status');
  const newUserInput = request.raw.get('new_user_input');
  if (status !== undefined) form.push(['status', status]);
  if (newUserInput !== undefined) form.push(['new_user_input', newUserInput]);
  if (extra.ping_only !== undefined) form.push(['ping_only', extra.ping_only]);
  if (extra.slim_presence !== undefined && poll.featureLevel >= FL.SLIM_PRESENCE) form.push(['slim_presence', extra.slim_presence]);
  const headers = { ...forwardedHeaders(req), 'content-type': 'application/x-www-form-urlencoded' };
  const path = `${apiPrefixOf(req.url)}/users/me/presence`;
  return { realm, method: 'POST', path, headers, body: encodeForm(form) };
}
