import { FL, PRESENCE_CHANGES } from '../upstream/feature-level.js';
import type { ApiChange } from './types.js';

/**
 * Feature level 263 (Zulip 9.0): incremental presence (`last_update_id`,
 * `presence_last_update_id`), the modern format for every client that asks for it, its history
 * limit, and the same in register (P1–P15, R1). Below it the shim emulates the whole modern
 * presence API (src/presence/, register/handler.ts); from it on, presence and register pass
 * through untouched.
 */
const presence = (feature: string, by: string) =>
  ({ featureLevel: FL.LAST_UPDATE_ID, feature, emulation: { by } }) as const satisfies ApiChange;

export const presenceLastUpdateId = presence(PRESENCE_CHANGES.lastUpdateId, 'presence/handler.ts');
export const presenceModernFormat = presence(PRESENCE_CHANGES.modernFormat, 'presence/handler.ts');
export const presenceHistoryLimitDays = presence(PRESENCE_CHANGES.historyLimitDays, 'presence/handler.ts');
export const registerPresenceLastUpdateId = presence('register_presence_last_update_id', 'register/handler.ts');
