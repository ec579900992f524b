import { timedUpstream } from '../context.js';
import { encodeForm } from '../http/body.js';
import { forwardedHeaders, type BufferedResponse } from '../upstream/client.js';
import { FL } from '../upstream/feature-level.js';
import { fetchFullPresence, type Asker } from './intake.js';
import type { PresenceRequest } from './params.js';

/**
 * The caller's own presence report to the upstream (P9: every caller's status reaches it), as a
 * `ping_only` call when the answer comes from a shared snapshot, or as the full fetch itself.
 */

/** A presence poll on an upstream below feature level 263. */
export interface Poll extends Asker {
  featureLevel: number;
  request: PresenceRequest;
}

/** An upstream answer that is not a success: the caller gets it unchanged (E1). */
export class UpstreamRefused extends Error {
  constructor(readonly response: BufferedResponse) {
    super(`upstream answered ${response.status}`);
  }
}

/** The caller's own report, form-encoded, with only parameters the upstream knows. */
export async function report(
  poll: Poll,
  extra: { ping_only?: string | undefined; slim_presence?: string | undefined },
): Promise<BufferedResponse> {
  const { request, ctx, req, realm } = poll;
  const form: Array<[string, string]> = [];
  const status = request.raw.get('status');
  const newUserInput = request.raw.get('new_user_input');
  if (status !== undefined) form.push(['status', status]);
  if (newUserInput !== undefined) form.push(['new_user_input', newUserInput]);
  if (extra.ping_only !== undefined) form.push(['ping_only', extra.ping_only]);
  if (extra.slim_presence !== undefined && poll.featureLevel >= FL.SLIM_PRESENCE) form.push(['slim_presence', extra.slim_presence]);
  const headers = { ...forwardedHeaders(req), 'content-type': 'application/x-www-form-urlencoded' };
  const path = req.url?.startsWith('/json/') ? '/json/users/me/presence' : '/api/v1/users/me/presence';
  const call = { realm, method: 'POST' as const, path, headers, body: encodeForm(form) };
  // B7: a full answer grows with the realm and has its own budget.
  return timedUpstream(req, () => (extra.ping_only === 'false' ? fetchFullPresence(poll, call) : ctx.client.fetch(call)));
}
