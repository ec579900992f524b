import type { Params } from '../http/body.js';
import { COMPLETE_FROM_LEVEL, changesAbove, noneAdded, type Added } from '../profile/changes/index.js';
import { parseJsonObject } from '../upstream/client.js';
import { backfillList, emailIndex, parseWithListInSteps, stringifyInSteps } from '../profile/user-objects.js';

/**
 * The user parts of a register answer (V1–V3): `realm_users`, `realm_non_active_users` and
 * `cross_realm_bots` filled by the user-object changes, and `user_settings` (feature level 89)
 * built from the legacy top-level settings where the upstream lacks it. The register handler
 * asks `registerNeedsUsers` before its call and `backfillRegisterUsers` on the parsed answer.
 */

/** Feature level 89 (Zulip 5.0): register's `user_settings` object. */
export const USER_SETTINGS_LEVEL = 89;

/** The register keys holding user objects. */
export const USER_LISTS = ['realm_users', 'realm_non_active_users', 'cross_realm_bots'] as const;
type UserList = (typeof USER_LISTS)[number];

/**
 * Settings of the modern `user_settings` object (as a 9.x server sends it) that older servers
 * send at the top level under the same name (V3).
 */
const SAME_NAME_SETTINGS = [
  'twenty_four_hour_time',
  'dense_mode',
  'starred_message_counts',
  'fluid_layout_width',
  'high_contrast_mode',
  'color_scheme',
  'translate_emoticons',
  'display_emoji_reaction_users',
  'default_language',
  'left_side_userlist',
  'emojiset',
  'demote_inactive_streams',
  'timezone',
  'enter_sends',
  'enable_drafts_synchronization',
  'enable_stream_desktop_notifications',
  'enable_stream_email_notifications',
  'enable_stream_push_notifications',
  'enable_stream_audible_notifications',
  'notification_sound',
  'enable_desktop_notifications',
  'enable_sounds',
  'email_notifications_batching_period_seconds',
  'enable_offline_email_notifications',
  'enable_offline_push_notifications',
  'enable_online_push_notifications',
  'enable_digest_emails',
  'enable_marketing_emails',
  'enable_login_emails',
  'message_content_in_email_notifications',
  'pm_content_in_desktop_notifications',
  'wildcard_mentions_notify',
  'desktop_icon_count_display',
  'presence_enabled',
  'available_notification_sounds',
  'emojiset_choices',
  'send_private_typing_notifications',
  'send_stream_typing_notifications',
  'send_read_receipts',
  'user_list_style',
  'email_address_visibility',
] as const;

/** Legacy top-level names whose `user_settings` name changed (feature level 223). */
const RENAMED_SETTINGS: ReadonlyArray<readonly [legacy: string, modern: string]> = [
  ['default_view', 'web_home_view'],
  ['escape_navigates_to_default_view', 'web_escape_navigates_to_home_view'],
];

/** Feature level 3 (Zulip 3.0): the `presence_enabled` setting; 2.1 has no invisible mode. */
const PRESENCE_ENABLED_LEVEL = 3;

/**
 * The event types a register fetches, read once per request: `fetch_event_types`, which
 * defaults to `event_types`, which defaults to all.
 */
export interface EventTypes {
  /** The types listed; undefined: every type (none given, or JSON that is not a list). */
  readonly listed: readonly unknown[] | undefined;
  /** Not JSON: the upstream will reject the register; its answer then passes unchanged (E1). */
  readonly unreadable: boolean;
}

export function eventTypesOf(params: Params): EventTypes {
  const raw = params.get('fetch_event_types') ?? params.get('event_types');
  if (raw === undefined) return { listed: undefined, unreadable: false };
  try {
    const v: unknown = JSON.parse(raw);
    return { listed: Array.isArray(v) ? v : undefined, unreadable: false };
  } catch {
    return { listed: undefined, unreadable: true };
  }
}

/** Does the register fetch this event type? Nothing, as far as the shim goes, when unreadable. */
export function fetchesType(types: EventTypes, type: string): boolean {
  return !types.unreadable && (types.listed === undefined || types.listed.includes(type));
}

const asksForSettings = (types: EventTypes) => fetchesType(types, 'realm_user') || fetchesType(types, 'user_settings');

/** Must the answer be read for its users (V1) or its user_settings (V3)? */
export function registerNeedsUsers(featureLevel: number, types: EventTypes): boolean {
  return (
    (featureLevel < COMPLETE_FROM_LEVEL && fetchesType(types, 'realm_user')) ||
    (featureLevel < USER_SETTINGS_LEVEL && asksForSettings(types))
  );
}

/**
 * V3: `user_settings` from the legacy top-level settings of an answer, or undefined when it
 * sent none the shim can vouch for. The top-level keys stay (U1). Pure.
 */
export function userSettingsOf(body: Readonly<Record<string, unknown>>, featureLevel: number): Record<string, unknown> | undefined {
  const out: Record<string, unknown> = {};
  for (const name of SAME_NAME_SETTINGS) if (name in body) out[name] = body[name];
  for (const [legacy, modern] of RENAMED_SETTINGS) if (legacy in body) out[modern] = body[legacy];
  if (Object.keys(out).length === 0) return undefined;
  // 2.1 has no invisible mode: everyone's presence is shown (V3).
  if (!('presence_enabled' in out) && featureLevel < PRESENCE_ENABLED_LEVEL) out.presence_enabled = true;
  return out;
}

/**
 * Fills the answer's user lists and adds `user_settings`, in place; returns what was added
 * (U4). The caller's own row gets its real address from the answer's top-level `delivery_email`.
 * 2.1 bot owners named by an email several users share are recorded in `sharedOwners` (X10).
 */
export async function backfillRegisterUsers(
  body: Record<string, unknown>,
  featureLevel: number,
  types: EventTypes,
  sharedOwners: Map<string, number | undefined>,
): Promise<Added> {
  const into = noneAdded();
  const changes = changesAbove(featureLevel);
  const named = USER_LISTS.map((k) => [k, body[k]] as const).filter((e): e is readonly [UserList, unknown[]] => Array.isArray(e[1]));
  if (changes.length > 0 && named.length > 0) {
    const own =
      typeof body.user_id === 'number'
        ? { userId: body.user_id, deliveryEmail: typeof body.delivery_email === 'string' ? body.delivery_email : undefined }
        : undefined;
    const idOfEmail = emailIndex(
      named.map(([, list]) => list),
      sharedOwners,
    );
    for (const [key, list] of named) {
      await backfillList(list, changes, into, { idOfEmail, own, systemBots: key === 'cross_realm_bots' });
    }
  }
  if (featureLevel < USER_SETTINGS_LEVEL && !('user_settings' in body) && asksForSettings(types)) {
    const settings = userSettingsOf(body, featureLevel);
    if (settings) {
      body.user_settings = settings;
      into.added.push('user_settings');
      into.sources.user_settings = 'rule';
    }
  }
  return into;
}

/** A register answer parsed with its `realm_users` (the one list that grows with the realm) in steps (V4). */
export function parseRegisterAnswer(body: Buffer): Promise<Record<string, unknown>> {
  return parseWithListInSteps(body, 'realm_users', parseJsonObject);
}

/** The answer's JSON, its user lists serialised in steps (V4). */
export function serializeRegister(body: Record<string, unknown>): Promise<Buffer> {
  return stringifyInSteps(body, USER_LISTS);
}
