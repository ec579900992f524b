import type { IncomingMessage } from 'node:http';
import { recordChange } from '../observability/request-facts.js';
import { PRESENCE_CHANGES } from '../upstream/feature-level.js';
import type { AnswerKind } from './answers.js';
import type { PresenceRequest } from './params.js';

/**
 * The modern presence API's changes an answer the shim built (below feature level 263) applied,
 * recorded on its request for client_requests_total: `presence_last_update_id` in every one (P4),
 * the modern format in every answer but the legacy one (P1, P2), the history limit where the
 * request gave one that applies (P12: no `last_update_id` above 0).
 */
export function recordPresenceChanges(req: IncomingMessage, kind: AnswerKind, request: PresenceRequest): void {
  recordChange(req, PRESENCE_CHANGES.lastUpdateId);
  if (kind !== 'legacy_full') recordChange(req, PRESENCE_CHANGES.modernFormat);
  const continuing = request.lastUpdateId !== undefined && request.lastUpdateId > 0;
  if (request.historyLimitDays !== undefined && !continuing) recordChange(req, PRESENCE_CHANGES.historyLimitDays);
}
