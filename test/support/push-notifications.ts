/**
 * M7: `POST /api/v1/remotes/push/notify` bodies as Zulip 7.0 and 8.0 servers send them to their
 * bouncer, after zerver/lib/push_notifications.py of each series: `send_notifications_to_bouncer`
 * (the body), `get_base_payload`, `get_message_payload`, `get_message_payload_gcm` /
 * `_apns` and `get_remove_payload_gcm` / `_apns` (the payloads). What differs by era:
 *
 * - 7.x: no `realm_name` (feature level 234, 8.0) and no `realm_url` (257, 9.0) in either
 *   payload; the Android payload still has `alert`, and `time` only there; the body names the
 *   user by `user_uuid` and `user_id`.
 * - 8.x: `realm_name` in both payloads, still no `realm_url`; no `alert`; `time` in both; the
 *   body adds `realm_uuid` and the user's device tokens (`android_devices`, `apple_devices`).
 *
 * Values are the test realm's: https://chat.example.com, realm name "Example" (the fake
 * upstream's server_settings say the same), user 10 receiving a mention from user 11.
 */

export type PushEra = '7.0' | '8.0';
export type PushKind = 'message' | 'remove';
/** Where the message of a `message` notification was sent. */
export type PushRecipient = 'stream' | 'group' | 'dm';

type Json = Record<string, unknown>;

export const REALM_URL = 'https://chat.example.com';
export const REALM_NAME = 'Example';
const MESSAGE_ID = 123;
const SENT = 1_700_000_000;

function base(era: PushEra): Json {
  return {
    server: 'chat.example.com',
    realm_id: 2,
    realm_uri: REALM_URL,
    ...(era === '8.0' ? { realm_name: REALM_NAME } : {}),
    user_id: 10,
  };
}

/** `get_message_payload`: common to both platforms. */
function messagePayload(era: PushEra, to: PushRecipient): Json {
  const where: Json =
    to === 'stream'
      ? { recipient_type: 'stream', stream: 'Verona', stream_id: 5, topic: 'greetings' }
      : to === 'group'
        ? { recipient_type: 'private', pm_users: '10,11,12' }
        : { recipient_type: 'private' };
  return { ...base(era), sender_id: 11, sender_email: 'hamlet@example.com', ...(era === '8.0' ? { time: SENT } : {}), ...where };
}

const CONTENT = 'Hello @Othello, what a day. 👋';
const ALERT_TITLE: Record<PushRecipient, string> = {
  stream: '#Verona > greetings',
  group: 'King Hamlet, Othello, Iago',
  dm: 'King Hamlet',
};

function gcmMessage(era: PushEra, to: PushRecipient): Json {
  return {
    ...messagePayload(era, to),
    event: 'message',
    ...(era === '7.0' ? { alert: 'King Hamlet mentioned you in #Verona' } : {}),
    zulip_message_id: MESSAGE_ID,
    ...(era === '7.0' ? { time: SENT } : {}),
    content: CONTENT,
    content_truncated: false,
    sender_full_name: 'King Hamlet',
    sender_avatar_url: 'https://chat.example.com/avatar/11?s=120&version=2',
  };
}

function apnsMessage(era: PushEra, to: PushRecipient): Json {
  return {
    alert: { title: ALERT_TITLE[to], subtitle: to === 'dm' ? '' : 'King Hamlet mentioned you:', body: CONTENT },
    sound: 'default',
    badge: 0,
    custom: { zulip: { ...messagePayload(era, to), message_ids: [MESSAGE_ID] } },
  };
}

const REMOVED = [MESSAGE_ID, 124];

function gcmRemove(era: PushEra): Json {
  return { ...base(era), event: 'remove', zulip_message_ids: REMOVED.join(','), zulip_message_id: REMOVED[0] };
}

function apnsRemove(era: PushEra): Json {
  return { badge: 0, custom: { zulip: { ...base(era), event: 'remove', zulip_message_ids: REMOVED.join(',') } } };
}

/** The notify body a server of `era` sends for a notification of `kind`. */
export function notifyBody(era: PushEra, kind: PushKind, to: PushRecipient = 'stream'): Json {
  const apns = kind === 'message' ? apnsMessage(era, to) : apnsRemove(era);
  const gcm = kind === 'message' ? gcmMessage(era, to) : gcmRemove(era);
  const options = { priority: kind === 'message' ? 'high' : 'normal' };
  const user = { user_uuid: '4f1b1c4e-2b5f-4b61-9d9e-0c7f4a7e1a10', user_id: 10 };
  if (era === '7.0') return { ...user, apns_payload: apns, gcm_payload: gcm, gcm_options: options };
  return {
    ...user,
    realm_uuid: '0b5a3c0e-8f3e-4d1b-a1a9-6e1f2f3c4d5e',
    apns_payload: apns,
    gcm_payload: gcm,
    gcm_options: options,
    android_devices: ['fcm-token-of-a-phone'],
    apple_devices: ['apns-token-of-a-phone'],
  };
}

/**
 * The data of the FCM message the app receives for `gcm_payload` (zulip-flutter's
 * `RemoteMessage.data`): FCM carries string values only, so each value arrives as a string, a
 * number in decimal, anything else as JSON text.
 */
export function fcmData(gcm: Json): Record<string, string> {
  return Object.fromEntries(
    Object.entries(gcm).map(([k, v]) => [k, typeof v === 'string' ? v : typeof v === 'number' ? String(v) : JSON.stringify(v)]),
  );
}

/** The two payloads the app reads, from a notify body. */
export function payloadsOf(body: Json): { gcm: Json; apns: Json } {
  const apns = body.apns_payload as { custom: { zulip: Json } };
  return { gcm: body.gcm_payload as Json, apns: apns.custom.zulip };
}
