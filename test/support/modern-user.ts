import type { FakeZulip, FakeUser } from './fake-zulip.js';

/**
 * The fields every modern (9.x) user object carries for `u`, as a server at the fake's feature
 * level would have made them, from the fake's own records. Roles the era did not have fall back
 * to what that server made of the user. The own profile (U2) and the user lists (V1) add the
 * fields that differ between them (delivery_email, is_active, profile_data, bot fields).
 */
export function modernUserFields(fake: FakeZulip, u: FakeUser): Record<string, unknown> {
  const fl = fake.featureLevel;
  const isAdmin = u.role <= 200;
  const isOwner = fl >= 8 && u.role === 100;
  const isGuest = u.role === 600;
  return {
    email: u.email,
    user_id: u.user_id,
    full_name: u.full_name,
    avatar_url: `https://secure.gravatar.com/avatar/${u.user_id}?d=identicon&version=${u.avatar_version}`,
    avatar_version: u.avatar_version,
    is_admin: isAdmin,
    is_owner: isOwner,
    is_guest: isGuest,
    is_billing_admin: fl >= 73 ? u.is_billing_admin : false,
    is_bot: u.is_bot,
    role: fl >= 59 ? u.role : isOwner ? 100 : isAdmin ? 200 : isGuest ? 600 : 400,
    timezone: u.timezone,
    date_joined: u.date_joined,
  };
}
