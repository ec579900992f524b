import { timedUpstream } from '../observability/request-facts.js';
import type { UpstreamHead } from '../upstream/client.js';
import { heldLedger, recordInLedger } from './ledger-io.js';
import { dateHeaderTime } from './upstream-time.js';
import type { LedgerState, ModernPresence } from './ledger.js';
import type { Poll } from './report.js';
import type { Snapshot } from './snapshots.js';
import type { Reported } from './state.js';
import { apiPrefixOf } from '../http/api-prefix.js';
import { FL } from '../upstream/feature-level.js';

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

/** P15: the caller's accepted active report, as the upstream's observation of its own user. */
export interface OwnReport {
  userId: number;
  presence: ModernPresence;
}

/** P15 without a ledger (S3): a user's entry in an upstream answer, raised to their own report (never lowered, I8). */
export function withOwnReport(seen: ModernPresence | undefined, report: ModernPresence): ModernPresence {
  if (!seen) return report;
  const active = Math.max(seen.active_timestamp, report.active_timestamp);
  return { active_timestamp: active, idle_timestamp: Math.max(seen.idle_timestamp, report.idle_timestamp, active) };
}

/**
 * Records the caller's accepted report (its upstream answer's head) when it said `active` and
 * the upstream applies it, and returns it (an answer made without the ledger shows it too, S3).
 * Never fails the poll: a lookup that fails leaves the answer as the snapshot has it.
 */
export async function recordOwnReport(poll: Poll, own: UpstreamHead | undefined, snapshot: Snapshot): Promise<OwnReport | undefined> {
  if (!own || poll.request.raw.get('status') !== 'active') return undefined;
  const at = dateHeaderTime(own.headers); // the upstream's time, never the shim's (P6)
  if (at === undefined) return undefined;
  const userId = await reportingUser(poll);
  if (userId === undefined || !appliedReport(poll, snapshot, userId, at)) return undefined;
  const active = Math.floor(at);
  const report = { userId, presence: { active_timestamp: active, idle_timestamp: active } };
  if (activeSince(heldLedger(poll), userId, active)) return report;
  await recordInLedger(poll, { serverTimestamp: at, presences: new Map([[userId, report.presence]]), complete: false, report: true });
  return report;
}

/** The caller's user id, or undefined for a bot (no presence, P7) or when the lookup fails. */
async function reportingUser(poll: Poll): Promise<number | undefined> {
  const { ctx, req, realm } = poll;
  try {
    const path = `${apiPrefixOf(req.url)}/users/me`;
    const caller = await timedUpstream(req, () => ctx.callers.get(realm, req, path));
    return caller.isBot ? undefined : caller.userId;
  } catch (e) {
    ctx.log.warn({ realm: realm.host, err: { message: (e as Error).message } }, 'own presence report: caller lookup failed');
    return undefined;
  }
}

/** Whether the upstream applies the user's report made at `at` (3.0+: not in invisible mode), remembering it. */
function appliedReport(poll: Poll, snapshot: Snapshot, userId: number, at: number): boolean {
  const { ctx, realm } = poll;
  // Before invisible mode (changes/fl003-invisible-mode.ts) every report is applied.
  if (poll.featureLevel < FL.INVISIBLE_MODE) return true;
  const key = `${realm.key}|${userId}`;
  const applied = appliesReports(ctx.presence.ownReports.get(key), snapshot, userId);
  ctx.presence.ownReports.set(key, { at, applied });
  return applied === true;
}

function activeSince(ledger: LedgerState | undefined, userId: number, active: number): boolean {
  const e = ledger?.users.get(userId);
  return e?.present === true && e.active >= active - MIN_FREQ_SECONDS;
}
