import { isUtf8 } from 'node:buffer';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { translateRequest } from '../changes/app-parts.js';
import {
  batchAnswer,
  batchIds,
  legacyAnswer,
  planFlagsNarrow,
  type FlagsNarrowAnswer,
  type FlagsNarrowPlan,
} from '../changes/fl155-flags-narrow.js';
import type { Site } from '../changes/types.js';
import type { ShimContext } from '../context.js';
import { isFormEncoded, readBody } from '../http/body.js';
import { sendEncoded } from '../http/compress.js';
import { apiPathOf } from '../http/api-routes.js';
import { FormFields } from '../http/form-fields.js';
import { recordChanges, recordFacts, timedUpstream } from '../observability/request-facts.js';
import { forwardedHeaders, parseJsonObject, type BufferedResponse } from '../upstream/client.js';
import type { Realm } from '../upstream/realm.js';
import { isSuccess, relayBuffered } from '../upstream/relay.js';

/**
 * M2, feature level 155 (changes/fl155-flags-narrow.ts): the app's POST /messages/flags/narrow,
 * answered in front of an upstream without it from the calls the app itself made below 155, every
 * one through the one upstream client with the app's own credentials. An upstream's refusal of any
 * of them is the app's answer, as it came.
 */

/** What the calls need of the request they stand in for. */
interface Call {
  ctx: Pick<ShimContext, 'config' | 'client'>;
  req: IncomingMessage;
  realm: Realm;
  prefix: string;
  headers: Record<string, string>;
}

const FORM = 'application/x-www-form-urlencoded';

function upstream(c: Call, method: 'GET' | 'POST', path: string, form?: Record<string, string>): Promise<BufferedResponse> {
  const body = form === undefined ? undefined : new URLSearchParams(form).toString();
  const headers = body === undefined ? c.headers : { ...c.headers, 'content-type': FORM };
  const call = { realm: c.realm, method, path: `${c.prefix}${path}`, headers };
  return timedUpstream(c.req, () => c.ctx.client.fetch(body === undefined ? call : { ...call, body }));
}

/** Carries out `plan`: the app's answer, or the upstream's refusal of one of the calls. */
async function carryOut(c: Call, plan: FlagsNarrowPlan): Promise<{ answer: FlagsNarrowAnswer } | { refused: BufferedResponse }> {
  if (plan.kind === 'legacy') {
    const r = await upstream(c, 'POST', plan.path, plan.form);
    return isSuccess(r.status) ? { answer: legacyAnswer() } : { refused: r };
  }
  const fetched = await upstream(c, 'GET', `/messages?${new URLSearchParams(plan.query).toString()}`);
  if (!isSuccess(fetched.status)) return { refused: fetched };
  const messages = parseJsonObject(fetched.body);
  const ids = batchIds(messages, plan.leaveOut);
  if (ids.length === 0) return { answer: batchAnswer(ids, [], messages) };
  const flagged = await upstream(c, 'POST', '/messages/flags', { messages: JSON.stringify(ids), op: plan.op, flag: plan.flag });
  if (!isSuccess(flagged.status)) return { refused: flagged };
  return { answer: batchAnswer(ids, parseJsonObject(flagged.body).messages, messages) };
}

/** The app's POST /messages/flags/narrow on an upstream below 155, its narrow put into that upstream's form first. */
export async function emulateFlagsNarrow(
  req: IncomingMessage,
  res: ServerResponse,
  ctx: Pick<ShimContext, 'config' | 'client'>,
  realm: Realm,
  levels: { real: number; shown: number; site: Site },
): Promise<void> {
  const raw = await readBody(req, ctx.config.server.bodyLimitBytes);
  const type = req.headers['content-type'];
  const form = new FormFields(isFormEncoded(type) && isUtf8(raw) ? raw.toString('utf8') : '');
  // The narrow's operators as the upstream knows them (dm, channel, with), as for GET /messages.
  recordChanges(req, translateRequest('POST /messages/flags/narrow', form, levels.real, levels.shown, {}, levels.site).applied);
  const prefix = apiPathOf((req.url ?? '').split('?')[0]!)?.prefix ?? '/api/v1';
  const plan = planFlagsNarrow(form);
  const out = await carryOut({ ctx, req, realm, prefix, headers: forwardedHeaders(req) }, plan);
  recordFacts(req).kind = 'app-translated';
  if ('refused' in out) return relayBuffered(res, out.refused);
  await sendEncoded(req, res, 200, { raw: Buffer.from(JSON.stringify(out.answer)) });
}
