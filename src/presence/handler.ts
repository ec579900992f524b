import type { ServerResponse } from 'node:http';
import { recordFacts, timedUpstream } from '../observability/request-facts.js';
import { parseParams, readBody } from '../http/body.js';
import { sendEncoded } from '../http/compress.js';
import { sendBytes } from '../http/errors.js';
import { isRefused, isSuccess, relay, relayBuffered, rewrittenHeaders } from '../upstream/relay.js';
import { forwardedHeaders, parseJsonObject } from '../upstream/client.js';
import { FL } from '../upstream/feature-level.js';
import { realmOf, type Realm } from '../upstream/realm.js';
import type { IncomingMessage } from 'node:http';
import type { PresenceContext, PresenceHandler } from './context.js';
import { legacyAnswer, modernAnswer, type Built } from './answers.js';
import { presenceEra } from './convert.js';
import type { Format } from './intake.js';
import { parsePresenceRequest, upstreamWillReject, wantsModern, withIgnored } from './params.js';
import { report, type Poll } from './report.js';
import { obtainSnapshot } from './sharing.js';
import { recordOwnReport } from './own-report.js';
import { handedOver } from './handover.js';
import { recordPresenceChanges } from './applied-changes.js';

/**
 * POST /api/v1/users/me/presence and /json/users/me/presence. On an upstream at feature level
 * 263 or above the request goes through untouched (X7). Below it: the caller's status is always
 * reported upstream; full presence is fetched at most once per window per scope (P9, sharing.ts),
 * taken into the realm's ledger (P2–P7, intake.ts, recorded through ledger-io.ts), and each
 * caller gets a full answer or a delta built from the ledger (answers.ts).
 */
export const presenceHandler: PresenceHandler = async (req, res, ctx) => {
  const raw = await readBody(req, ctx.config.server.bodyLimitBytes);
  // X12: the realm the upstream serves for this Host keys its state.
  const resolved = await timedUpstream(req, () => ctx.featureLevels.resolve(realmOf(ctx.upstreamId, req.headers)));
  if (isRefused(resolved)) return relayBuffered(res, resolved.refused); // E1
  const { realm, featureLevel } = resolved;
  const f = recordFacts(req);
  f.realm = realm.host;
  f.featureLevel = featureLevel;
  // X7: the upstream speaks the modern presence API itself, and validates its own parameters.
  if (featureLevel >= FL.LAST_UPDATE_ID) return passThrough(req, res, ctx, realm, raw);

  // E3, in the modern server's order and words, before the presence call.
  const request = parsePresenceRequest(await parseParams(req, raw));
  const poll: Poll = { req, ctx, realm, featureLevel, era: presenceEra(featureLevel), request };
  // A value only the upstream validates is wrong: let it say so in its own words (E1).
  if (upstreamWillReject(request, featureLevel)) {
    return relayBuffered(
      res,
      await report(poll, { ping_only: request.raw.get('ping_only'), slim_presence: request.raw.get('slim_presence') }),
    );
  }
  if (request.pingOnly) return pingOnly(poll, res);
  // X12: a realm new to the shim keeps state once the upstream accepts the caller for it.
  const refused = await timedUpstream(req, () => ctx.admission.admitCaller(req, realm, featureLevel));
  if (refused) return relayBuffered(res, refused);
  const modern = wantsModern(request);
  // 2.1 has only the legacy format, which then feeds modern answers too.
  const format: Format = modern && poll.era !== 'legacy' ? 'slim' : 'legacy';
  const obtained = await obtainSnapshot(poll, format);
  // E1: the caller's report refused, the upstream's answer goes on as it came.
  if (isRefused(obtained)) return relayBuffered(res, obtained.refused);
  const { snapshot, own } = obtained;
  // P15: the caller's own report is in the ledger its modern answer is built from (or in an
  // answer made without it, S3).
  const ownReport = modern ? await recordOwnReport(poll, own, snapshot) : undefined;
  const built = modern ? await modernAnswer(poll, snapshot, ownReport) : await legacyAnswer(poll, snapshot);
  await send(poll, res, built, own ? rewrittenHeaders(own.headers) : {});
};

async function passThrough(req: IncomingMessage, res: ServerResponse, ctx: PresenceContext, realm: Realm, raw: Buffer): Promise<void> {
  ctx.metrics.presenceAnswers.inc({ kind: 'passthrough' });
  recordFacts(req).kind = 'passthrough';
  const headers: Record<string, string> = { ...forwardedHeaders(req), 'accept-encoding': req.headers['accept-encoding'] ?? 'identity' };
  if (req.headers['content-type']) headers['content-type'] = req.headers['content-type'];
  // X13: a client still holding an id the shim issued before the upstream's upgrade.
  const handover = await handedOver(req, raw).catch(() => undefined); // unreadable: the upstream words the error
  if (handover) headers['content-type'] = 'application/x-www-form-urlencoded';
  const path = handover?.path ?? req.url ?? '/';
  const body = handover?.body ?? raw;
  const r = await timedUpstream(req, () => ctx.client.stream({ realm, method: 'POST', path, headers, body }));
  return relay(res, r);
}

/** P8: the status is reported; the answer carries no presence data (P11 still applies). */
async function pingOnly(poll: Poll, res: ServerResponse): Promise<void> {
  const r = await report(poll, { ping_only: 'true' });
  if (!isSuccess(r.status)) return relayBuffered(res, r);
  poll.ctx.metrics.presenceAnswers.inc({ kind: 'ping' });
  recordFacts(poll.req).kind = 'ping';
  const body = withIgnored(parseJsonObject(r.body), poll.request.ignored);
  sendBytes(res, r.status, Buffer.from(JSON.stringify(body)), rewrittenHeaders(r.headers));
}

/** Sends the answer; the bytes-saved metric counts it against its full equivalent once it went out. */
async function send(poll: Poll, res: ServerResponse, built: Built, headers: Record<string, string | string[]>): Promise<void> {
  const { ctx, req } = poll;
  ctx.metrics.presenceAnswers.inc({ kind: built.kind });
  recordFacts(req).kind = built.kind;
  recordPresenceChanges(req, built.kind, poll.request);
  const sent = await sendEncoded(req, res, 200, built.body, headers);
  setImmediate(async () => {
    ctx.metrics.presenceBytesSent.inc({ kind: built.kind }, sent);
    // Never below what was sent, so 1 - sent/full is a saving, never negative.
    ctx.metrics.presenceBytesFull.inc({ kind: built.kind }, Math.max(sent, await built.fullEquivalentBytes()));
  });
}
