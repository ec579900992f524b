/**
 * What the Zulip mobile app (zulip-flutter at the commit docs/mobile-app.md pins) sends: its
 * User-Agent, and its POST /register form (lib/api/route/events.dart registerQueue).
 */

export const APP_AGENT = 'ZulipFlutter/30.0.274 (Android 14)';
/** The app this one replaced, which the flag leaves alone. */
export const OTHER_AGENT = 'ZulipMobile/27.0 (Android 14)';

export const APP_REGISTER: Readonly<Record<string, string>> = {
  idle_queue_timeout: 'mobile',
  apply_markdown: 'true',
  client_gravatar: 'false',
  slim_presence: 'true',
  client_capabilities: JSON.stringify({
    notification_settings_null: true,
    bulk_message_deletion: true,
    user_avatar_url_field_optional: true,
    stream_typing_notifications: true,
    user_settings_object: true,
    include_deactivated_groups: true,
    empty_topic_name: true,
    individual_emoji_changes: true,
  }),
};
