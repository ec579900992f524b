import { timedUpstream } from '../context.js';
import { forwardedHeaders, type UpstreamHead } from '../upstream/client.js';
import { callers } from '../profile/lookups.js';
import { dateHeaderTime, recordInLedger } from './intake.js';
import type { LedgerState } from './ledger.js';
import type { Poll } from './report.js';

/**
 * P15: a caller that reported `active` sees its own user active as of that report, also when
 * the rest of its answer comes from a shared snapshot taken before it (or from a fetch the
 * upstream answered before its presence worker applied the report: every release before 9.x
 * applies reports later, in a queue). The accepted report enters the realm's ledger as the
 * upstream's observation, timed by the report's own answer, so every client's ids stay exact.
 *
 * Only where the report cannot have been ignored: a user in invisible mode (`presence_enabled`
 * false, feature level 3) has reports the upstream drops, and the shim cannot tell such a user
 * from the report's answer. Zulip 2.1 has no invisible mode.
 */

/** Feature level 3 (Zulip 3.0): `presence_enabled`; before it every report is applied. */
const INVISIBLE_MODE_LEVEL = 3;

/**
 * A modern server writes a user's active time at most this often (PRESENCE_UPDATE_MIN_FREQ_SECONDS):
 * a report within it of the active time the ledger holds changes nothing a client shows.
 */
const MIN_FREQ_SECONDS = 55;

/**
 * Records the caller's accepted report (its upstream answer's head) when it said `active`.
 * Returns the caller's user id when its user is in the ledger as of that report (the answer
 * then shows it, P15), else undefined. Never fails the poll: a lookup that fails leaves the
 * answer as the snapshot has it.
 */
export async function recordOwnReport(poll: Poll, own: UpstreamHead | undefined): Promise<number | undefined> {
  const { ctx, req, realm, featureLevel, request } = poll;
  if (!own || request.raw.get('status') !== 'active' || featureLevel >= INVISIBLE_MODE_LEVEL) return undefined;
  const at = dateHeaderTime(own.headers); // the upstream's time, never the shim's (P6)
  if (at === undefined) return undefined;
  const active = Math.floor(at);
  let userId: number;
  try {
    const path = req.url?.startsWith('/json/') ? '/json/users/me' : '/api/v1/users/me';
    const caller = await timedUpstream(req, () => callers(ctx).get(realm, req.headers, path, forwardedHeaders(req)));
    if (caller.isBot) return undefined; // bots have no presence (P7)
    userId = caller.userId;
  } catch (e) {
    ctx.log.warn({ realm: realm.host, err: { message: (e as Error).message } }, 'own presence report: caller lookup failed');
    return undefined;
  }
  if (activeSince(ctx.store.peek(realm.key), userId, active)) return userId;
  const presences = new Map([[userId, { active_timestamp: active, idle_timestamp: active }]]);
  const ledger = await recordInLedger(poll, { serverTimestamp: at, presences, complete: false, report: true });
  return ledger ? userId : undefined;
}

function activeSince(ledger: LedgerState | undefined, userId: number, active: number): boolean {
  const e = ledger?.users.get(userId);
  return e?.present === true && e.active >= active - MIN_FREQ_SECONDS;
}
