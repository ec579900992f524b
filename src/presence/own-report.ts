import { timedUpstream } from '../observability/request-facts.js';
import type { UpstreamHead } from '../upstream/client.js';
import { dateHeaderTime, recordInLedger } from './intake.js';
import type { LedgerState, ModernPresence } from './ledger.js';
import type { Poll } from './report.js';
import type { Snapshot } from './snapshots.js';
import type { Reported } from './state.js';
import { apiPrefixOf } from '../http/api-prefix.js';

/**
 * P15: a caller that reported `active` sees its own user active as of that report, also when
 * the rest of its answer comes from a shared snapshot taken before it (or from a fetch the
 * upstream answered before its presence worker applied the report: every release before 9.x
 * applies reports later, in a queue). The accepted report enters the realm's ledger as the
 * upstream's observation, timed by the report's own answer, so every client's ids stay exact.
 *
 * Only where the upstream applies the report: from Zulip 3.0 (feature level 3) a user in
 * invisible mode (`presence_enabled` false) has reports the upstream accepts and drops, and
 * showing them would show an invisible user online. Zulip 2.1 has no invisible mode. From 3.0
 * the shim takes a user's reports in once the upstream has shown that it applies them: a
 * snapshot taken after the user's previous report (a second later, for the upstream's queue)
 * shows that report; one that does not stops it again.
 */

/** Feature level 3 (Zulip 3.0): `presence_enabled`; before it every report is applied. */
const INVISIBLE_MODE_LEVEL = 3;

/**
 * A modern server writes a user's active time at most this often (PRESENCE_UPDATE_MIN_FREQ_SECONDS):
 * a report within it of the active time the ledger holds changes nothing a client shows.
 */
const MIN_FREQ_SECONDS = 55;

/** How long after a report (upstream seconds) a snapshot must be taken to show it: the upstream's queue. */
const APPLIED_WITHIN_SECONDS = 1;

/**
 * Whether the upstream applies the user's reports, from what `snapshot` shows of them after the
 * previous one (3.0+): unknown until a snapshot taken after a report shows it, or does not.
 */
export function appliesReports(
  previous: Reported | undefined,
  snapshot: Pick<Snapshot, 'serverTimestamp' | 'modern'>,
  userId: number,
): boolean | undefined {
  if (!previous) return undefined;
  const seen: ModernPresence | undefined = snapshot.modern?.get(userId);
  if (!snapshot.modern || snapshot.serverTimestamp < previous.at + APPLIED_WITHIN_SECONDS) return previous.applied;
  return seen !== undefined && seen.idle_timestamp >= Math.floor(previous.at);
}

/**
 * Records the caller's accepted report (its upstream answer's head) when it said `active` and
 * the upstream applies it. Never fails the poll: a lookup that fails leaves the answer as the
 * snapshot has it.
 */
export async function recordOwnReport(poll: Poll, own: UpstreamHead | undefined, snapshot: Snapshot): Promise<void> {
  const { ctx, req, realm, featureLevel, request } = poll;
  if (!own || request.raw.get('status') !== 'active') return;
  const at = dateHeaderTime(own.headers); // the upstream's time, never the shim's (P6)
  if (at === undefined) return;
  let userId: number;
  try {
    const path = `${apiPrefixOf(req.url)}/users/me`;
    const caller = await timedUpstream(req, () => ctx.callers.get(realm, req, path));
    if (caller.isBot) return; // bots have no presence (P7)
    userId = caller.userId;
  } catch (e) {
    ctx.log.warn({ realm: realm.host, err: { message: (e as Error).message } }, 'own presence report: caller lookup failed');
    return;
  }
  if (featureLevel >= INVISIBLE_MODE_LEVEL) {
    const key = `${realm.key}|${userId}`;
    const applied = appliesReports(ctx.presence.ownReports.get(key), snapshot, userId);
    ctx.presence.ownReports.set(key, { at, applied });
    if (applied !== true) return;
  }
  const active = Math.floor(at);
  if (activeSince(ctx.store.peek(realm.key), userId, active)) return;
  const presences = new Map([[userId, { active_timestamp: active, idle_timestamp: active }]]);
  await recordInLedger(poll, { serverTimestamp: at, presences, complete: false, report: true });
}

function activeSince(ledger: LedgerState | undefined, userId: number, active: number): boolean {
  const e = ledger?.users.get(userId);
  return e?.present === true && e.active >= active - MIN_FREQ_SECONDS;
}
