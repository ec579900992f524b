import type { IncomingMessage } from 'node:http';
import { encodeForm, isFormEncoded, parseParams, type Params } from '../http/body.js';
import { MODERN_USER_OBJECTS_LEVEL, changesAbove, noneAdded, type Added } from '../changes/index.js';
import { parseJsonObject } from '../upstream/client.js';
import { backfillList, emailIndex, parseWithListInSteps, stringifyInSteps } from '../profile/user-objects.js';
import {
  keysOfLegacyType,
  legacySettingTypes,
  USER_SETTINGS_LEVEL,
  userSettingsOf,
  type LegacySettingType,
} from '../changes/fl089-user-settings.js';

export { USER_SETTINGS_LEVEL } from '../changes/fl089-user-settings.js';

/**
 * The user parts of a register answer (V1–V3): `realm_users`, `realm_non_active_users` and
 * `cross_realm_bots` filled by the user-object changes, and `user_settings` (feature level 89)
 * built from the legacy top-level settings where the upstream lacks it. The register handler
 * asks `registerNeedsUsers` before its call and `backfillRegisterUsers` on the parsed answer.
 */

/** The register keys holding user objects. */
export const USER_LISTS = ['realm_users', 'realm_non_active_users', 'cross_realm_bots'] as const;
type UserList = (typeof USER_LISTS)[number];

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

/** V3: does the client ask for `user_settings` where the upstream lacks it (as a modern server's `want("user_settings")`)? */
export function buildsUserSettings(featureLevel: number, types: EventTypes): boolean {
  return featureLevel < USER_SETTINGS_LEVEL && fetchesType(types, 'user_settings');
}

/** Must the answer be read for its users (V1) or its user_settings (V3)? */
export function registerNeedsUsers(featureLevel: number, types: EventTypes): boolean {
  return (featureLevel < MODERN_USER_OBJECTS_LEVEL && fetchesType(types, 'realm_user')) || buildsUserSettings(featureLevel, types);
}

/**
 * V3: the legacy event types the shim adds to the client's `fetch_event_types` so that the
 * upstream sends the settings `user_settings` is built from; none when the client fetches every
 * type or asks for them itself.
 */
export function settingTypesToAdd(featureLevel: number, types: EventTypes): LegacySettingType[] {
  if (!buildsUserSettings(featureLevel, types) || types.listed === undefined) return [];
  return legacySettingTypes(featureLevel).filter((t) => !types.listed!.includes(t));
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
  added: readonly LegacySettingType[] = [],
): Promise<Added & { notBuilt?: string }> {
  const into: Added & { notBuilt?: string } = noneAdded();
  // The lists only the shim asked for go before anything is filled in them.
  if (added.includes('realm_user')) for (const key of USER_LISTS) delete body[key];
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
  if (buildsUserSettings(featureLevel, types) && !('user_settings' in body)) {
    const built = userSettingsOf(body, featureLevel);
    if ('missing' in built) {
      into.notBuilt = built.missing;
    } else {
      body.user_settings = built.settings;
      into.added.push('user_settings');
      into.sources.user_settings = 'lookup';
      // What the old server has no setting for: its fixed behaviour, named (V3, U4).
      for (const key of built.fixed) {
        into.added.push(`user_settings.${key}`);
        into.sources[`user_settings.${key}`] = 'rule';
      }
    }
  }
  for (const type of added) for (const key of keysOfLegacyType(type)) delete body[key];
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

/**
 * V3: the register request's body with `extra` event types added to `fetch_event_types` (the
 * queue's `event_types` untouched). A form body gets the parameter appended (the last value
 * wins, as in Django's QueryDict); a multipart one is sent again as a form. Sets `headers`'
 * content type to match.
 */
export async function withFetchTypes(
  req: IncomingMessage,
  raw: Buffer,
  types: EventTypes,
  extra: readonly string[],
  headers: Record<string, string>,
): Promise<Buffer> {
  const param = encodeForm([['fetch_event_types', JSON.stringify([...(types.listed ?? []), ...extra])]]);
  const form = isFormEncoded(req.headers['content-type']);
  headers['content-type'] = 'application/x-www-form-urlencoded';
  if (form) return Buffer.from(raw.length > 0 ? `${raw.toString('latin1')}&${param}` : param, 'latin1');
  // Any other body gave the server no fields (Django's request.POST): only the parameter goes.
  if (!(req.headers['content-type'] ?? '').toLowerCase().startsWith('multipart/form-data')) return Buffer.from(param);
  const own = await parseParams({ headers: req.headers } as IncomingMessage, raw); // the body's own fields, not the query's
  return Buffer.from(`${encodeForm(own.entries)}&${param}`);
}
