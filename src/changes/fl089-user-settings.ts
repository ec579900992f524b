import type { ApiChange } from './types.js';

/**
 * V3, W1: register's `user_settings` object (feature level 89) for an upstream that lacks it,
 * whole or not at all. Clients branch on the object: zulip-terminal reads every key once it is
 * there and takes its old-server path when it is absent. So the object carries every key that
 * Zulip 5.0 (feature level 122, the first release with it) puts in it, under 5.0's names: the
 * user's own value from the legacy top-level settings where the upstream has that setting, the
 * value equal to the old server's fixed behaviour where it has none (named in
 * `X-Zulip-Compat-Backfilled` as `user_settings.<key>`), and no object at all where a setting
 * the upstream has is missing from its answer. Pure: the register handler asks which legacy
 * event types to fetch (`legacySettingTypes`) and builds the object from the answer.
 */

/**
 * Feature level 89 (Zulip 5.0): register's `user_settings` object, for every client. Built in
 * register/users.ts from this module's table.
 */
export const userSettings = {
  featureLevel: 89,
  feature: 'register_user_settings',
  emulation: { by: 'register/users.ts' },
} as const satisfies ApiChange;

/** Feature level 89 (Zulip 5.0): register's `user_settings` object. */
export const USER_SETTINGS_LEVEL = userSettings.featureLevel;

/** The register event types under which servers before 5.0 send a user's settings at the top level. */
export type LegacySettingType = 'update_display_settings' | 'update_global_notifications' | 'realm_user';

type Json = boolean | number | string | readonly unknown[];

interface Setting {
  /** The key in `user_settings` as Zulip 5.0 sends it. */
  readonly key: string;
  /** The event type whose register data holds it at the top level on an older server. */
  readonly legacyType: LegacySettingType;
  /** The feature level that brought the setting; below it the server behaves as `fixed`, or keeps it as `older`. */
  readonly since?: number;
  /** The old server's behaviour, below `since`. */
  readonly fixed?: Json;
  /**
   * Where an older server's register leaves the setting out although the server has it: the
   * column's default, named as the server's fixed behaviour (marketing emails, which only Zulip
   * Cloud sends, are not in a register answer before 5.0).
   */
  readonly unsent?: Json;
  /** Below `since`, the user's setting under another name and meaning, and its value as this key. */
  readonly older?: { readonly name: string; readonly convert: (legacy: unknown) => unknown };
  /** The JSON type 5.0 sends (checked: a value of another type is no value of this key). */
  readonly type: 'boolean' | 'integer' | 'string' | 'array';
}

const display = (key: string, type: Setting['type'], more: Partial<Setting> = {}): Setting => ({
  key,
  type,
  legacyType: 'update_display_settings',
  ...more,
});
const notification = (key: string, type: Setting['type'], more: Partial<Setting> = {}): Setting => ({
  key,
  type,
  legacyType: 'update_global_notifications',
  ...more,
});

/** `color_scheme` values (feature level 16): automatic, night, day. */
const COLOR_SCHEME_NIGHT = 2;
const COLOR_SCHEME_DAY = 3;

/**
 * Every key of Zulip 5.0's `user_settings` (`UserProfile.property_types`, and the three it
 * adds: `timezone`, `emojiset_choices`, `available_notification_sounds`), with where an older
 * server keeps it.
 */
export const USER_SETTINGS_5_0: readonly Setting[] = [
  display('twenty_four_hour_time', 'boolean'),
  display('dense_mode', 'boolean'),
  display('starred_message_counts', 'boolean'),
  display('fluid_layout_width', 'boolean'),
  display('high_contrast_mode', 'boolean'),
  // 2.1 has a night_mode switch: night, or the day theme (there was no automatic one).
  display('color_scheme', 'integer', {
    since: 16,
    older: {
      name: 'night_mode',
      convert: (night) => (night === true ? COLOR_SCHEME_NIGHT : night === false ? COLOR_SCHEME_DAY : undefined),
    },
  }),
  display('translate_emoticons', 'boolean'),
  display('default_language', 'string'),
  // Before 4.0 the web app always opened on all messages.
  display('default_view', 'string', { since: 42, fixed: 'all_messages' }),
  // Before 5.0 Escape always went back to the default view.
  display('escape_navigates_to_default_view', 'boolean', { since: 107, fixed: true }),
  display('left_side_userlist', 'boolean'),
  display('emojiset', 'string'),
  display('demote_inactive_streams', 'integer'),
  display('timezone', 'string'),
  { key: 'enter_sends', type: 'boolean', legacyType: 'realm_user' },
  // Drafts stayed on the device before 5.0.
  { key: 'enable_drafts_synchronization', type: 'boolean', legacyType: 'update_display_settings', since: 87, fixed: false },
  notification('enable_stream_desktop_notifications', 'boolean'),
  notification('enable_stream_email_notifications', 'boolean'),
  notification('enable_stream_push_notifications', 'boolean'),
  notification('enable_stream_audible_notifications', 'boolean'),
  notification('notification_sound', 'string'),
  notification('enable_desktop_notifications', 'boolean'),
  notification('enable_sounds', 'boolean'),
  // Before 5.0 missed-message emails were batched over a fixed two minutes.
  notification('email_notifications_batching_period_seconds', 'integer', { since: 82, fixed: 120 }),
  notification('enable_offline_email_notifications', 'boolean'),
  notification('enable_offline_push_notifications', 'boolean'),
  notification('enable_online_push_notifications', 'boolean'),
  notification('enable_digest_emails', 'boolean'),
  notification('enable_marketing_emails', 'boolean', { unsent: true }),
  notification('enable_login_emails', 'boolean'),
  notification('message_content_in_email_notifications', 'boolean'),
  notification('pm_content_in_desktop_notifications', 'boolean'),
  notification('wildcard_mentions_notify', 'boolean'),
  notification('desktop_icon_count_display', 'integer'),
  notification('realm_name_in_notifications', 'boolean'),
  // 2.1 has no invisible mode: everyone's presence is shown.
  notification('presence_enabled', 'boolean', { since: 3, fixed: true }),
  // Typing notifications were always sent before 5.0; read receipts did not exist.
  notification('send_private_typing_notifications', 'boolean', { since: 105, fixed: true }),
  notification('send_stream_typing_notifications', 'boolean', { since: 105, fixed: true }),
  notification('send_read_receipts', 'boolean', { since: 105, fixed: false }),
  display('emojiset_choices', 'array'),
  notification('available_notification_sounds', 'array'),
];

/** The legacy event types whose data the object is built from, on an upstream at this level. */
export function legacySettingTypes(featureLevel: number): LegacySettingType[] {
  const types = new Set<LegacySettingType>();
  for (const s of USER_SETTINGS_5_0) if (s.since === undefined || featureLevel >= s.since || s.older) types.add(s.legacyType);
  return [...types];
}

const isType = (v: unknown, type: Setting['type']): boolean =>
  type === 'array' ? Array.isArray(v) : type === 'integer' ? Number.isInteger(v) : typeof v === type;

export interface BuiltSettings {
  /** The whole object, keys in 5.0's order. */
  settings: Record<string, unknown>;
  /** Keys whose value is the old server's fixed behaviour, not a setting of the user's. */
  fixed: string[];
}

/**
 * V3, W1: the whole `user_settings` object from the legacy top-level settings of a register
 * answer at `featureLevel`, or the first key it cannot have (the upstream has the setting but
 * its answer lacks it): then no object at all.
 */
export function userSettingsOf(body: Readonly<Record<string, unknown>>, featureLevel: number): BuiltSettings | { missing: string } {
  const settings: Record<string, unknown> = {};
  const fixed: string[] = [];
  for (const s of USER_SETTINGS_5_0) {
    const before = s.since !== undefined && featureLevel < s.since;
    const value =
      before && s.older
        ? Object.hasOwn(body, s.older.name)
          ? s.older.convert(body[s.older.name])
          : undefined
        : Object.hasOwn(body, s.key)
          ? body[s.key]
          : undefined;
    if (value !== undefined && isType(value, s.type)) {
      settings[s.key] = value;
    } else if (before && s.fixed !== undefined) {
      settings[s.key] = s.fixed;
      fixed.push(s.key);
    } else if (value === undefined && s.unsent !== undefined) {
      settings[s.key] = s.unsent;
      fixed.push(s.key);
    } else {
      return { missing: s.older && before ? s.older.name : s.key };
    }
  }
  return { settings, fixed };
}

/**
 * The top-level keys a legacy event type the shim asked for (and the client did not) adds to a
 * register answer, taken out again (R2: the client gets what it asked for): the settings the
 * object was built from, and what `realm_user` brings (the user lists, the caller's own user).
 */
export function keysOfLegacyType(type: LegacySettingType): string[] {
  const keys = USER_SETTINGS_5_0.filter((s) => s.legacyType === type).flatMap((s) => (s.older ? [s.key, s.older.name] : [s.key]));
  return type === 'realm_user' ? [...keys, ...REALM_USER_KEYS] : keys;
}

/** What `realm_user` brings besides `enter_sends`: the user lists and the caller's own user. */
const REALM_USER_KEYS = [
  'realm_users',
  'realm_non_active_users',
  'cross_realm_bots',
  'raw_users',
  'user_id',
  'email',
  'delivery_email',
  'full_name',
  'is_admin',
  'is_owner',
  'is_moderator',
  'is_guest',
  'is_billing_admin',
  'user_role',
  'avatar_source',
  'avatar_url',
  'avatar_url_medium',
  'can_create_streams',
  'can_create_public_streams',
  'can_create_private_streams',
  'can_create_web_public_streams',
  'can_subscribe_other_users',
  'can_invite_others_to_realm',
];
