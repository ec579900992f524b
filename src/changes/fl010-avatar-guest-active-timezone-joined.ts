import type { Fill, ApiChange } from './types.js';

/**
 * Feature level 10 (Zulip 3.0): `avatar_version`, `is_guest`, `is_active`, `timezone`,
 * `date_joined`. A 2.1 server already has them in its user list (GET /users), so the caller's
 * own row gives the true values (docs/behaviour.md, U1).
 *
 * Rules where the row is missing (the lookup failed): `is_active` is true (the upstream just
 * authenticated the caller, which it refuses for a deactivated account); `is_guest` false;
 * `timezone` "" (the API's "not set"); `date_joined` the Unix epoch, a recognisable "unknown".
 */

/** The date_joined stand-in when the user list cannot be read. */
export const UNKNOWN_DATE_JOINED = '1970-01-01T00:00:00+00:00';

/**
 * `avatar_version` where the upstream does not send it: 2.1 already appends the version to
 * every avatar URL it builds (`…&version=3`, `?x=x&version=3`), so the `version` (or `v`)
 * query parameter is the true value; without one, 1 (the version every account starts at).
 */
export function avatarVersionFromUrl(url: unknown): number | undefined {
  if (typeof url !== 'string') return undefined;
  // A regular expression rather than URLSearchParams: this runs for every row of a 2.1 user list.
  const query = url.split('#')[0]!;
  const raw = (VERSION_PARAM.exec(query) ?? V_PARAM.exec(query))?.[1];
  if (raw === undefined) return undefined;
  const n = Number(raw);
  return n >= 1 ? n : undefined;
}

const VERSION_PARAM = /[?&]version=(\d{1,9})(?:&|$)/;
const V_PARAM = /[?&]v=(\d{1,9})(?:&|$)/;

/** ISO 8601 with an offset (U3); Django writes UTC datetimes as `…+00:00`. */
const ISO_WITH_OFFSET = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;

export const avatarGuestActiveTimezoneJoined: ApiChange = {
  featureLevel: 10,
  feature: 'user_avatar_guest_active_timezone_joined',
  user: {
    fields: ['avatar_version', 'is_guest', 'is_active', 'timezone', 'date_joined'],
    needs: ['member'],
    fill(user, { member }) {
      const fromUrl = avatarVersionFromUrl(user.avatar_url);
      const avatarVersion: Fill =
        member?.avatar_version !== undefined
          ? { value: member.avatar_version, source: 'lookup' }
          : fromUrl !== undefined
            ? { value: fromUrl, source: 'rule' }
            : { value: 1, source: 'fallback' };
      const joined = member && ISO_WITH_OFFSET.test(member.date_joined) ? member.date_joined : undefined;
      return {
        avatar_version: avatarVersion,
        is_guest: member ? { value: member.is_guest, source: 'lookup' } : { value: false, source: 'fallback' },
        is_active: member ? { value: member.is_active, source: 'lookup' } : { value: true, source: 'rule' },
        timezone: member ? { value: member.timezone, source: 'lookup' } : { value: '', source: 'fallback' },
        date_joined: joined ? { value: joined, source: 'lookup' } : { value: UNKNOWN_DATE_JOINED, source: 'fallback' },
      };
    },
  },
};
