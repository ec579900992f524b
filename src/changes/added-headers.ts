import type { Added } from './index.js';

/**
 * U4: what the changes added to an answer (a user object, a list of them, a register answer),
 * named in its headers, the same way by every handler.
 */

/** U4: the fields the shim added, so an operator can see what came from where. */
export const BACKFILLED_HEADER = 'x-zulip-compat-backfilled';
/** Added fields whose lookup failed, so a documented rule stands in for the true value (U2). */
export const FALLBACK_HEADER = 'x-zulip-compat-fallback';

/** U4: the headers naming what was added to an answer and which of it is a fallback; none when nothing was. Pure. */
export function addedHeaders(into: Added | undefined): Record<string, string> {
  if (!into || into.added.length === 0) return {};
  const out: Record<string, string> = { [BACKFILLED_HEADER]: into.added.join(',') };
  const fallbacks = into.added.filter((k) => into.sources[k] === 'fallback');
  if (fallbacks.length > 0) out[FALLBACK_HEADER] = fallbacks.join(',');
  return out;
}
