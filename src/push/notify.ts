import { NOTIFICATION_CHANGES, noneAdded, type Added, type NotificationPayloadChange, type NotificationRealm } from '../changes/index.js';

/**
 * M7, pure: what the push relay does to the body of `POST /api/v1/remotes/push/notify` as an old
 * Zulip server sends it to its bouncer (zerver/lib/push_notifications.py,
 * `send_notifications_to_bouncer`): `{"user_id", "user_uuid", …, "gcm_payload": {…},
 * "apns_payload": {…, "custom": {"zulip": {…}}}, "gcm_options": {…}}`. The two payloads the app
 * reads get the fields of the registry's notification changes they lack; nothing else changes.
 */

/** A notification's kind, as the metrics count it: the payload's `event` (message, remove). */
export type NotificationKind = 'message' | 'remove' | 'other';

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The body as a JSON object, or undefined when it is none (it then goes on as it came). */
export function parseNotify(bytes: Buffer): Json | undefined {
  try {
    const v: unknown = JSON.parse(bytes.toString('utf8'));
    return isObject(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** A payload the app reads, and where it is in the body. */
export interface PayloadSlot {
  path: readonly string[];
  payload: Json;
}

/** The payloads the app reads, those that are objects: `gcm_payload` (Android), `apns_payload.custom.zulip` (iOS). */
export function payloadSlots(body: Json): PayloadSlot[] {
  const apns = body.apns_payload;
  const custom = isObject(apns) ? apns.custom : undefined;
  const slots: Array<{ path: readonly string[]; payload: unknown }> = [
    { path: ['gcm_payload'], payload: body.gcm_payload },
    { path: ['apns_payload', 'custom', 'zulip'], payload: isObject(custom) ? custom.zulip : undefined },
  ];
  return slots.flatMap((s) => (isObject(s.payload) ? [{ path: s.path, payload: s.payload }] : []));
}

export const payloadsOf = (body: Json): Json[] => payloadSlots(body).map((s) => s.payload);

/**
 * The kind: `event` of the Android payload, else of the iOS one; an iOS payload of a message
 * carries no `event`, but `message_ids`.
 */
export function kindOf(payloads: readonly Json[]): NotificationKind {
  for (const p of payloads) {
    if (p.event === 'message' || p.event === 'remove') return p.event;
    if (p.event === undefined && Array.isArray(p.message_ids)) return 'message';
  }
  return 'other';
}

/** The realm URL the notification names (`realm_url`, else `realm_uri`), or undefined. */
export function realmUrlOf(payloads: readonly Json[]): string | undefined {
  for (const p of payloads) {
    const url = p.realm_url ?? p.realm_uri;
    if (typeof url === 'string' && url !== '') return url;
  }
  return undefined;
}

/** The changes some payload lacks a field of: none, and the notification goes on as it came, unasked. */
export function pendingChanges(payloads: readonly Json[]): NotificationPayloadChange[] {
  return NOTIFICATION_CHANGES.filter((c) => payloads.some((p) => c.notification.fields.some((f) => !(f in p))));
}

/** The changes newer than the upstream's feature level; all of them when the level is not known. */
export function changesAbove(changes: readonly NotificationPayloadChange[], featureLevel: number | undefined): NotificationPayloadChange[] {
  return featureLevel === undefined ? [...changes] : changes.filter((c) => c.featureLevel > featureLevel);
}

/** What fillPayloads added: the fields and their sources (U4's shape), and each payload's new members in order. */
export interface Filled extends Added {
  members: Array<Array<[string, unknown]>>;
}

/**
 * Applies the changes in order to each payload, in place: a field the server sent is never
 * touched (U1), an added one goes after the server's. What was added, and where each value came
 * from (`fallback` wins), is returned.
 */
export function fillPayloads(payloads: readonly Json[], changes: readonly NotificationPayloadChange[], realm: NotificationRealm): Filled {
  const into: Filled = { ...noneAdded(), members: [] };
  for (const payload of payloads) {
    const members: Array<[string, unknown]> = [];
    into.members.push(members);
    for (const { notification } of changes) {
      const fills = notification.fill(payload, realm);
      for (const field of notification.fields) {
        const fill = fills[field];
        if (field in payload || !fill) continue;
        payload[field] = fill.value;
        members.push([field, fill.value]);
        const seen = into.sources[field];
        if (seen === undefined) into.added.push(field);
        if (seen === undefined || fill.source === 'fallback') into.sources[field] = fill.source;
      }
    }
  }
  return into;
}
