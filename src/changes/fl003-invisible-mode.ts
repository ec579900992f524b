import { FL } from '../upstream/feature-level.js';
import type { ApiChange } from './types.js';

/**
 * Feature level 3 (Zulip 3.0): invisible mode (`presence_enabled`). Nothing to emulate below it
 * (an older server has no invisible mode, and applies every report); from it on, the upstream may
 * accept a user's report and drop it, so the shim shows a caller's own report only once the
 * upstream has shown that it applies them (P15, presence/own-report.ts). A server behaviour the
 * shim takes into account, not a change it bridges: never named in T2's list.
 */
export const invisibleMode = {
  featureLevel: FL.INVISIBLE_MODE,
  feature: 'invisible_mode',
  serverBehaviour: { by: 'presence/own-report.ts' },
} as const satisfies ApiChange;
