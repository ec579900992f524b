import type { ServerResponse } from 'node:http';
import { facts, timedUpstream, type Handler } from '../context.js';
import { parseParams, readBody, encodeForm } from '../http/body.js';
import { sendEncoded } from '../http/compress.js';
import { sendBytes } from '../http/errors.js';
import { isSuccess, relay, relayBuffered, rewrittenHeaders } from '../http/relay.js';
import { forwardedHeaders, parseJsonObject, type BufferedResponse } from '../upstream/client.js';
import { FL } from '../upstream/feature-level.js';
import { callerKey, realmOf } from '../upstream/realm.js';
import { limitLegacyHistory, presenceEra } from './convert.js';
import { answer, answersWithDelta, type ModernPresence } from './ledger.js';
import {
  fetchFullPresence,
  legacyAnswerId,
  legacyBodyOf,
  loadLedger,
  observeAnswer,
  readPresenceAnswer,
  upstreamTime,
  type Asker,
  type Format,
} from './observe.js';
import { parsePresenceRequest, upstreamWillReject, wantsModern, type PresenceRequest } from './params.js';
import { everyCallerSeesTheSameUsers, fromData, toData, type Snapshot } from './snapshots.js';

/**
 * POST /api/v1/users/me/presence and /json/users/me/presence on an upstream below feature
 * level 263: the caller's status is always reported upstream; full presence is fetched at most
 * once per window per scope (P9), converted to the modern format (P1, P2), merged into the
 * realm's ledger (P3–P7), and each caller gets a full answer or a delta from it.
 */

/** An upstream answer that is not a success: the caller gets it unchanged (E1). */
class UpstreamRefused extends Error {
  constructor(readonly response: BufferedResponse) {
    super(`upstream answered ${response.status}`);
  }
}

interface Poll extends Asker {
  featureLevel: number;
  p: PresenceRequest;
}

export const presenceHandler: Handler = async (req, res, ctx) => {
  const raw = await readBody(req, ctx.config.server.bodyLimitBytes);
  const params = await parseParams(req, raw);
  // E3 before any upstream call, in the modern server's order and words.
  const p = parsePresenceRequest(params);

  const realm = realmOf(ctx.upstreamId, req.headers);
  const featureLevel = await timedUpstream(req, () => ctx.featureLevels.featureLevel(realm));
  const f = facts(req);
  f.realm = realm.host;
  f.featureLevel = featureLevel;

  if (featureLevel >= FL.LAST_UPDATE_ID) {
    // The upstream speaks the modern presence API itself: untouched.
    ctx.metrics.presenceAnswers.inc({ kind: 'passthrough' });
    f.kind = 'passthrough';
    const headers: Record<string, string> = { ...forwardedHeaders(req), 'accept-encoding': req.headers['accept-encoding'] ?? 'identity' };
    if (req.headers['content-type']) headers['content-type'] = req.headers['content-type'];
    const r = await timedUpstream(req, () => ctx.client.request({ realm, method: 'POST', path: req.url ?? '/', headers, body: raw }));
    return relay(res, r);
  }

  const poll: Poll = { req, ctx, realm, featureLevel, era: presenceEra(featureLevel), p };
  if (upstreamWillReject(p, featureLevel)) {
    // A value only the upstream validates is wrong: let it say so in its own words (E1).
    const r = await report(poll, { ping_only: poll.p.raw.get('ping_only'), slim_presence: poll.p.raw.get('slim_presence') });
    return relayBuffered(res, r);
  }
  if (poll.p.pingOnly) return pingOnly(poll, res);
  return fullPoll(poll, res);
};

/** The caller's own report to the upstream, form-encoded, with only parameters it knows. */
async function report(
  poll: Poll,
  extra: { ping_only?: string | undefined; slim_presence?: string | undefined },
): Promise<BufferedResponse> {
  const { p, ctx, req, realm } = poll;
  const form: Array<[string, string]> = [];
  if (p.raw.has('status')) form.push(['status', p.raw.get('status')!]);
  if (p.raw.has('new_user_input')) form.push(['new_user_input', p.raw.get('new_user_input')!]);
  if (extra.ping_only !== undefined) form.push(['ping_only', extra.ping_only]);
  if (extra.slim_presence !== undefined && poll.featureLevel >= FL.SLIM_PRESENCE) form.push(['slim_presence', extra.slim_presence]);
  const headers = { ...forwardedHeaders(req), 'content-type': 'application/x-www-form-urlencoded' };
  const path = req.url?.startsWith('/json/') ? '/json/users/me/presence' : '/api/v1/users/me/presence';
  const call = { realm, method: 'POST' as const, path, headers, body: encodeForm(form) };
  // B7: a full answer grows with the realm and has its own budget.
  return timedUpstream(req, () => (extra.ping_only === 'false' ? fetchFullPresence(poll, call) : ctx.client.fetch(call)));
}

/** P11: the upstream's own list is replaced by the shim's, which knows every parameter. */
function withIgnored(body: Record<string, unknown>, ignored: string[]): Record<string, unknown> {
  const { ignored_parameters_unsupported: _dropped, ...rest } = body;
  return ignored.length ? { ...rest, ignored_parameters_unsupported: ignored } : rest;
}

/** P8: the status is reported; the answer carries no presence data. */
async function pingOnly(poll: Poll, res: ServerResponse): Promise<void> {
  const r = await report(poll, { ping_only: 'true' });
  if (!isSuccess(r.status)) return relayBuffered(res, r);
  poll.ctx.metrics.presenceAnswers.inc({ kind: 'ping' });
  facts(poll.req).kind = 'ping';
  const body = withIgnored(parseJsonObject(r.body), poll.p.ignored);
  sendBytes(res, r.status, Buffer.from(JSON.stringify(body)), rewrittenHeaders(r.headers));
}

function scopeOf(poll: Poll, format: Format): { scope: string; shared: boolean } {
  const { ctx, featureLevel, realm, req } = poll;
  const shared = everyCallerSeesTheSameUsers(ctx.config.presence.shareSnapshots, featureLevel);
  return { scope: shared ? `${realm.key}|${format}` : `${realm.key}|${format}|${callerKey(req.headers)}`, shared };
}

async function fullPoll(poll: Poll, res: ServerResponse): Promise<void> {
  const { ctx } = poll;
  const modern = wantsModern(poll.p);
  // 2.1 has only the legacy format, which then feeds modern answers too.
  const format: Format = modern && poll.era !== 'legacy' ? 'slim' : 'legacy';
  const { scope, shared } = scopeOf(poll, format);
  const hub = ctx.snapshots;

  let snapshot = hub.fresh(scope);
  const pending = snapshot ? undefined : hub.pending(scope);
  let own: BufferedResponse | undefined;
  if (snapshot || pending) {
    // P9: the caller's own report still reaches the upstream, and only a caller the upstream
    // accepts sees shared data.
    own = await report(poll, { ping_only: 'true' });
    if (!isSuccess(own.status)) return relayBuffered(res, own);
    snapshot ??= await pending!.catch(() => undefined);
    if (snapshot) ctx.metrics.presenceSnapshots.inc({ source: 'shared' });
  }
  if (!snapshot) {
    try {
      let leaderAnswer: BufferedResponse | undefined;
      snapshot = await hub.lead(
        scope,
        async () => {
          const r = await fetchSnapshot(poll, format, shared, scope);
          leaderAnswer = r.own;
          return r.snapshot;
        },
        shared,
      );
      own = leaderAnswer ?? own;
    } catch (e) {
      if (e instanceof UpstreamRefused) return relayBuffered(res, e.response);
      throw e;
    }
  }
  await respond(poll, res, snapshot, modern, own);
}

/** One full upstream presence fetch (the caller's own report), converted and merged. */
async function fetchSnapshot(
  poll: Poll,
  format: Format,
  shared: boolean,
  scope: string,
): Promise<{ snapshot: Snapshot; own?: BufferedResponse }> {
  const { ctx } = poll;
  const cluster = shared ? ctx.clusterSnapshots : undefined;
  const window = ctx.config.presence.coalesceMs;
  if (cluster && window > 0) {
    // S1/P9 across replicas: read another replica's snapshot, or wait for the one fetching.
    let data = await cluster.get(scope).catch(() => undefined);
    const locked = data ? false : await cluster.tryLock(scope, window).catch(() => true);
    if (data || !locked) {
      const own = await report(poll, { ping_only: 'true' });
      if (!isSuccess(own.status)) throw new UpstreamRefused(own);
      data ??= await cluster.waitFor(scope, Math.max(window, 1000)).catch(() => undefined);
      if (data) {
        ctx.metrics.presenceSnapshots.inc({ source: 'shared' });
        return { snapshot: fromData(data, await loadLedger(poll), ctx.snapshots.answerCaches()), own };
      }
    }
  }
  try {
    const own = await report(poll, { ping_only: 'false', slim_presence: format === 'slim' ? 'true' : undefined });
    if (!isSuccess(own.status)) throw new UpstreamRefused(own);
    ctx.metrics.presenceSnapshots.inc({ source: 'upstream' });
    // B7: parsed and converted off the main thread; only the columns come back.
    const presences = await readPresenceAnswer(poll, format, own.body);
    const serverTimestamp = upstreamTime(presences.top, own.headers);
    const { modern, modernError, ledger } = await observeAnswer(poll, format, presences, serverTimestamp, shared);
    const snapshot: Snapshot = {
      serverTimestamp,
      fetchedAt: Date.now(),
      modern,
      modernError,
      legacy: format === 'legacy' ? legacyBodyOf(presences.top, own.body) : undefined,
      legacyBytes: format === 'legacy' ? own.body : undefined,
      ledger,
      ...ctx.snapshots.answerCaches(),
    };
    if (cluster && window > 0) await cluster.publish(scope, toData(snapshot), window).catch(() => undefined);
    return { snapshot, own };
  } catch (e) {
    if (cluster) await cluster.release(scope).catch(() => undefined);
    throw e;
  }
}

const kindOf = (p: PresenceRequest, full: boolean) =>
  !full ? 'delta' : p.lastUpdateId !== undefined && p.lastUpdateId > 0 ? 'resync' : 'modern_full';

async function respond(poll: Poll, res: ServerResponse, s: Snapshot, modern: boolean, own: BufferedResponse | undefined): Promise<void> {
  const { p, ctx, req } = poll;
  const headers = own ? rewrittenHeaders(own.headers) : {};
  const built = modern ? modernAnswer(s, p) : legacyAnswer(s, p);
  // Callers at the same id with the same parameters get the same bytes (built once).
  const key = p.ignored.length ? undefined : `${built.key}|${built.id}`;
  let body = key ? s.bodies.get(key) : undefined;
  if (!body) {
    body = { raw: built.body() };
    if (key) s.bodies.set(key, body);
  }
  ctx.metrics.presenceAnswers.inc({ kind: built.kind });
  facts(req).kind = built.kind;
  const sent = await sendEncoded(req, res, 200, body, headers);
  ctx.metrics.presenceBytesSent.inc(sent);
  // The reference size for the bytes saved, once per snapshot, after the answer went out.
  if (modern) setImmediate(() => ctx.metrics.presenceBytesFull.inc(fullModernSize(s)));
}

/** Cached presences JSON and the largest id in it, per snapshot and answer key. */
function cached(s: Snapshot, key: string, build: () => { json: string; maxId: number }) {
  let a = s.answers.get(key);
  if (!a) {
    a = build();
    s.answers.set(key, a);
  }
  return a;
}

/** Size of the full modern answer for the same poll: the reference for the bytes saved. */
function fullModernSize(s: Snapshot): number {
  let e = s.bodies.get('full-size');
  if (!e) {
    const { json } = modernPresences(s, undefined, undefined);
    e = { raw: Buffer.from(`{"result":"success","msg":"","server_timestamp":${JSON.stringify(s.serverTimestamp)},"presences":${json}}`) };
    s.bodies.set('full-size', e);
  }
  return e.raw.length;
}

function modernPresences(s: Snapshot, lastUpdateId: number | undefined, historyLimitDays: number | undefined) {
  const ledger = s.ledger;
  const modern = s.modern ?? new Map<number, ModernPresence>();
  if (!ledger) {
    // No ledger (store down): full data from the snapshot itself, no id (P5).
    return cached(s, `nl|${historyLimitDays ?? ''}`, () => {
      const out: Record<string, ModernPresence> = {};
      const cutoff = historyLimitDays === undefined ? -Infinity : s.serverTimestamp - historyLimitDays * 86_400;
      if (historyLimitDays !== 0) for (const [id, e] of modern) if (e.idle_timestamp >= cutoff) out[String(id)] = e;
      return { json: JSON.stringify(out), maxId: -1, full: true };
    });
  }
  const key = answersWithDelta(ledger, lastUpdateId) ? `delta|${lastUpdateId}` : `full|${historyLimitDays ?? ''}`;
  return cached(s, key, () => {
    const a = answer(ledger, { visible: modern.keys(), lastUpdateId, historyLimitDays, serverTimestamp: s.serverTimestamp });
    return { json: JSON.stringify(a.presences), maxId: Object.keys(a.presences).length ? a.presenceLastUpdateId : -1 };
  });
}

interface Built {
  /** What the body depends on besides the per-caller parameters. */
  key: string;
  id: number;
  kind: string;
  body: () => Buffer;
}

function modernAnswer(s: Snapshot, p: PresenceRequest): Built {
  // Never an empty map in place of data that could not be converted (P3).
  if (!s.modern && s.modernError) throw s.modernError;
  const x = p.lastUpdateId;
  const full = !s.ledger || !answersWithDelta(s.ledger, x);
  const { json, maxId } = modernPresences(s, x, p.historyLimitDays);
  // P4: the largest id returned; else the client's own id echoed; else -1. No ledger: -1 (P5).
  const id = !s.ledger ? -1 : maxId >= 0 ? maxId : x !== undefined ? x : -1;
  const ignored = p.ignored.length ? `,"ignored_parameters_unsupported":${JSON.stringify(p.ignored)}` : '';
  return {
    key: `m|${full ? 'full' : x}|${p.historyLimitDays ?? ''}`,
    id,
    kind: s.ledger ? kindOf(p, full) : 'modern_full',
    body: () =>
      Buffer.from(
        `{"result":"success","msg":"","server_timestamp":${JSON.stringify(s.serverTimestamp)},"presences":${json},"presence_last_update_id":${id}${ignored}}`,
      ),
  };
}

function legacyAnswer(s: Snapshot, p: PresenceRequest): Built {
  // The id only (the body is the upstream's), computed once per snapshot: it walks every user.
  const id = cached(s, `lid|${p.historyLimitDays ?? ''}`, () => ({ json: '', maxId: legacyAnswerId(s, p.historyLimitDays) })).maxId;
  return {
    key: `l|${p.historyLimitDays ?? ''}`,
    id,
    kind: 'legacy_full',
    body: () => {
      const upstream = s.legacy ?? {};
      const asMade =
        s.legacyBytes && p.historyLimitDays === undefined && !p.ignored.length && !('ignored_parameters_unsupported' in upstream);
      const end = asMade ? s.legacyBytes!.lastIndexOf('}') : -1;
      // The upstream's own bytes with the id added before the closing brace: exactly as it made
      // them (P1), and no re-serialisation of a multi-megabyte answer on the event loop.
      if (end > 0) return Buffer.concat([s.legacyBytes!.subarray(0, end), Buffer.from(`,"presence_last_update_id":${id}}`)]);
      let presences = (upstream.presences ?? {}) as Record<string, unknown>;
      if (p.historyLimitDays !== undefined) presences = limitLegacyHistory(presences, p.historyLimitDays, s.serverTimestamp);
      return Buffer.from(JSON.stringify(withIgnored({ ...upstream, presences, presence_last_update_id: id }, p.ignored)));
    },
  };
}
