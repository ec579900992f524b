import { botOwnerId } from './fl001-bot-owner-id.js';
import { getUserById } from './fl001-get-user-by-id.js';
import { invisibleMode } from './fl003-invisible-mode.js';
import { isOwner } from './fl008-is-owner.js';
import { avatarGuestActiveTimezoneJoined } from './fl010-avatar-guest-active-timezone-joined.js';
import { getUserByEmail } from './fl039-get-user-by-email.js';
import { role } from './fl059-role.js';
import { isBillingAdmin } from './fl073-is-billing-admin.js';
import { isSystemBot } from './fl083-is-system-bot.js';
import { userSettings } from './fl089-user-settings.js';
import { emojiReactionUsers } from './fl125-emoji-reaction-users.js';
import { directSubgroups } from './fl131-direct-subgroups.js';
import { wildcardMentionPolicy } from './fl133-wildcard-mention-policy.js';
import { userTopicsRegister } from './fl134-user-topics-register.js';
import { readReceipts } from './fl137-read-receipts.js';
import { editLimitNone } from './fl138-edit-limit-none.js';
import { subscriptionIsMuted } from './fl139-subscription-is-muted.js';
import { serverEmojiDataUrl } from './fl140-server-emoji-data-url.js';
import { flagsNarrow } from './fl155-flags-narrow.js';
import { deliveryEmail } from './fl163-delivery-email.js';
import { presenceSettings } from './fl164-presence-settings.js';
import { userTopics } from './fl170-user-topics.js';
import { fetchApiKeyUserId } from './fl171-fetch-api-key-user-id.js';
import { typeDirect } from './fl174-type-direct.js';
import { dmOperator } from './fl177-dm-operator.js';
import { typingPeriods } from './fl204-typing-periods.js';
import { typingStreamId } from './fl215-typing-stream-id.js';
import { topicWildcard } from './fl224-topic-wildcard.js';
import { notificationRealmName } from './fl234-notification-realm-name.js';
import { readBySender } from './fl236-read-by-sender.js';
import { channelWildcard } from './fl247-channel-wildcard.js';
import { typeChannel } from './fl248-type-channel.js';
import { channelOperator } from './fl250-channel-operator.js';
import { notificationRealmUrl } from './fl257-notification-realm-url.js';
import {
  presenceHistoryLimitDays,
  presenceLastUpdateId,
  presenceModernFormat,
  registerPresenceLastUpdateId,
} from './fl263-presence-last-update-id.js';
import { withOperatorChange } from './fl271-with-operator.js';
import { thumbnailFormats } from './fl273-thumbnail-formats.js';
import type { ApiChange, Lookups, Need, NotificationChange, Source, UserObject, UserObjectChange } from './types.js';

export type { ApiChange, Lookups, Need, OwnUser, Source, UserObject, UserObjectChange } from './types.js';
export type { NotificationPayload, NotificationRealm } from './types.js';

/** Why a change cannot be in the bundle after `previous`, or undefined. */
function faultOf(c: ApiChange, previous: number): string | undefined {
  if (!Number.isInteger(c.featureLevel) || c.featureLevel < 1) return `feature level ${c.featureLevel} (${c.feature}) is not a level`;
  if (c.featureLevel < previous) return `feature level ${c.featureLevel} (${c.feature}) is below ${previous}`;
  const parts = [
    c.user,
    c.request,
    c.content,
    c.register,
    c.answer,
    c.notification,
    c.endpoint,
    c.lookup,
    c.staticData,
    c.parameter,
    c.appEmulation,
    c.emulation,
    c.serverBehaviour,
  ];
  if (parts.every((part) => part === undefined)) return `${c.feature} changes nothing`;
  if (c.emulation && c.emulation.by.trim() === '') return `${c.feature} is emulated nowhere`;
  if (c.serverBehaviour && parts.filter((part) => part !== undefined).length > 1) {
    return `${c.feature} is a server behaviour the shim takes into account: it bridges nothing`;
  }
  if (c.serverBehaviour && c.serverBehaviour.by.trim() === '') return `${c.feature} is taken into account nowhere`;
  return undefined;
}

/**
 * Checks a bundle of changes when it is built (like Cadwyn's VersionBundle): feature levels in
 * ascending order (several changes may share one, as in Zulip's changelog), each field and each
 * feature name introduced once, each change doing something (a part, or an emulation that names
 * where it is done). Throws on the first fault.
 */
export function checkedBundle(changes: readonly ApiChange[]): readonly ApiChange[] {
  const fields = new Set<string>();
  const features = new Set<string>();
  let previous = 0;
  for (const c of changes) {
    const fault = faultOf(c, previous);
    if (fault) throw new Error(`API changes: ${fault}`);
    previous = c.featureLevel;
    if (features.has(c.feature)) throw new Error(`API changes: feature ${c.feature} named twice`);
    features.add(c.feature);
    for (const f of [...(c.user?.fields ?? []), ...(c.register?.fields ?? []), ...(c.staticData ? [c.staticData.field] : [])]) {
      if (fields.has(f)) throw new Error(`API changes: field ${f} introduced twice (again at ${c.featureLevel})`);
      fields.add(f);
    }
    for (const f of c.notification?.fields ?? []) {
      if (fields.has(`notification:${f}`))
        throw new Error(`API changes: notification field ${f} introduced twice (again at ${c.featureLevel})`);
      fields.add(`notification:${f}`);
    }
  }
  return Object.freeze([...changes]);
}

/**
 * U2, V1, M2: the API changes the shim bridges, in feature-level order, one module each, each
 * lining up with one entry of Zulip's API changelog. A change's `user` part fills every caller's
 * user objects (later ones may read what earlier ones added: role reads is_owner). Its other
 * parts are the mobile app's alone (M1 decides whose requests; app/translate.ts applies them):
 * `request` and `content` put its requests into the form of an upstream below the level,
 * `register` and `answer` bring what it receives up to the level it is shown, `endpoint` sends a
 * request to the endpoint an older upstream has in its place, `lookup` adds to an answer what
 * another call of the upstream says, `staticData` serves what a newer server serves at a URL its
 * register answer names, built from an older upstream's static file, `parameter` makes an answer
 * what a parameter the upstream ignores would have made it, `appEmulation` answers the app an
 * endpoint the upstream lacks from calls to those it has. A change with an `emulation` only is
 * declared here and done by a handler of its own, for every client (an endpoint an older server
 * lacks, the modern presence API). A `serverBehaviour` is no bridge: a newer server's behaviour
 * the shim's own code takes into account (invisible mode), declared so every feature level the
 * shim reads is here, and never listed in T2.
 */
export const CHANGES: readonly ApiChange[] = checkedBundle([
  botOwnerId,
  getUserById,
  invisibleMode,
  isOwner,
  avatarGuestActiveTimezoneJoined,
  getUserByEmail,
  role,
  isBillingAdmin,
  isSystemBot,
  userSettings,
  emojiReactionUsers,
  directSubgroups,
  wildcardMentionPolicy,
  userTopicsRegister,
  readReceipts,
  editLimitNone,
  subscriptionIsMuted,
  serverEmojiDataUrl,
  flagsNarrow,
  deliveryEmail,
  presenceSettings,
  userTopics,
  fetchApiKeyUserId,
  typeDirect,
  dmOperator,
  typingPeriods,
  typingStreamId,
  topicWildcard,
  notificationRealmName,
  readBySender,
  channelWildcard,
  typeChannel,
  channelOperator,
  notificationRealmUrl,
  presenceLastUpdateId,
  presenceModernFormat,
  presenceHistoryLimitDays,
  registerPresenceLastUpdateId,
  withOperatorChange,
  thumbnailFormats,
]);

/**
 * The name each change is counted by when applied to a request (client_requests_total's
 * `change`): its feature name, unique in the registry (checkedBundle), so the label's values are
 * the registry's and no more. A server behaviour is taken into account, never applied: not one.
 */
export const CHANGE_IDS: ReadonlySet<string> = new Set(CHANGES.filter((c) => !c.serverBehaviour).map((c) => c.feature));

/** The change each part belongs to, and each field a change introduces (they are introduced once: checkedBundle). */
const OWNER_OF_PART = new Map<object, string>();
const OWNER_OF_FIELD = new Map<string, string>();
for (const c of CHANGES) {
  const parts = [c.user, c.request, c.content, c.register, c.answer, c.endpoint, c.lookup, c.staticData, c.parameter, c.appEmulation];
  for (const part of parts) if (part) OWNER_OF_PART.set(part, c.feature);
  for (const f of [...(c.user?.fields ?? []), ...(c.register?.fields ?? []), ...(c.staticData ? [c.staticData.field] : [])])
    OWNER_OF_FIELD.set(f, c.feature);
}

/** The ids (feature names) of the changes `parts` (`change.answer`, `change.staticData`, …) belong to, in order; a part of none is left out. */
export function changeIdsOf(parts: readonly object[]): string[] {
  return parts.flatMap((part) => {
    const id = OWNER_OF_PART.get(part);
    return id === undefined ? [] : [id];
  });
}

/**
 * The ids of the changes that introduce `fields` (an answer's added fields, as
 * X-Zulip-Compat-Backfilled names them), each once, in order; a field no change part introduces
 * (one an emulation builds, `ignored_parameters_unsupported`) is left out.
 */
export function changeIdsOfFields(fields: readonly string[]): string[] {
  const ids: string[] = [];
  for (const field of fields) {
    const id = OWNER_OF_FIELD.get(field);
    if (id !== undefined && !ids.includes(id)) ids.push(id);
  }
  return ids;
}

/** The changes with a part in user objects, in order. */
export const USER_CHANGES: readonly UserObjectChange[] = CHANGES.filter((c): c is UserObjectChange => c.user !== undefined);

/** The feature level from which an upstream's user objects lack nothing the shim adds. */
export const MODERN_USER_OBJECTS_LEVEL = USER_CHANGES[USER_CHANGES.length - 1]!.featureLevel;

/** The user-object changes newer than an upstream at `featureLevel`. */
export function changesAbove(featureLevel: number): UserObjectChange[] {
  return USER_CHANGES.filter((c) => c.featureLevel > featureLevel);
}

/** What the shim emulates in user objects for an upstream at `featureLevel` (T2). */
export function emulatedUserFeatures(featureLevel: number): string[] {
  return changesAbove(featureLevel).map((c) => c.feature);
}

/**
 * T2: what the shim emulates for every client of an upstream at `featureLevel`: the changes above
 * it with a user-object part or an emulation, in feature-level order, and `own_user_fields` first
 * when a user-object change is among them. (The app's parts are the app's alone, M1; a server
 * behaviour is emulated nowhere.)
 */
export function emulatedFeatures(featureLevel: number): string[] {
  const above = CHANGES.filter((c) => c.featureLevel > featureLevel && (c.user || c.emulation));
  return [...(above.some((c) => c.user) ? ['own_user_fields'] : []), ...above.map((c) => c.feature)];
}

/** The changes an upstream at `featureLevel` needs for this answer: newer than it, with a field missing. */
export function pendingChanges(featureLevel: number, user: UserObject): UserObjectChange[] {
  return changesAbove(featureLevel).filter((c) => c.user.fields.some((f) => !(f in user)));
}

export function needsOf(changes: readonly UserObjectChange[]): Set<Need> {
  return new Set(changes.flatMap((c) => c.user.needs));
}

/** The fields added to one or many objects, in the order first added (U4), and their sources. */
export interface Added {
  added: string[];
  /** Where each added field came from; `fallback` wins over the others for a list. */
  sources: Record<string, Source>;
}

export interface Backfilled extends Added {
  user: Record<string, unknown>;
}

export function noneAdded(): Added {
  return { added: [], sources: {} };
}

/**
 * Applies the changes in order to `user` itself; U1: a field the upstream sent is never
 * touched. Records what was added in `into`. Pure but for those two objects.
 */
export function backfillInPlace(user: Record<string, unknown>, changes: readonly UserObjectChange[], found: Lookups, into: Added): void {
  for (const { user: change } of changes) {
    if (change.fields.every((f) => f in user)) continue;
    const fills = change.fill(user, found);
    for (const field of change.fields) {
      const fill = fills[field];
      if (field in user || !fill) continue;
      user[field] = fill.value;
      const seen = into.sources[field];
      if (seen === undefined) into.added.push(field);
      if (seen === undefined || fill.source === 'fallback') into.sources[field] = fill.source;
    }
  }
}

/** Applies the changes in order to a copy of `upstream`; U1: a field the upstream sent is never touched. Pure. */
export function applyChanges(upstream: UserObject, changes: readonly UserObjectChange[], found: Lookups): Backfilled {
  const user: Record<string, unknown> = { ...upstream };
  const into = noneAdded();
  backfillInPlace(user, changes, found, into);
  return { user, ...into };
}

/** A change with a part in push notifications (M7). */
export type NotificationPayloadChange = ApiChange & { readonly notification: NotificationChange };

/** The changes with a part in push notifications, in order (M7). */
export const NOTIFICATION_CHANGES: readonly NotificationPayloadChange[] = CHANGES.filter(
  (c): c is NotificationPayloadChange => c.notification !== undefined,
);
