/**
 * A Zulip 2.1 `GET /users` row (zulip-server.md §5.2: no is_owner, role, avatar_version,
 * is_billing_admin or delivery_email), the `i`-th of a synthetic realm: every 50th user a bot,
 * every 100th an administrator, every 20th (from the 8th) a guest, every 30th deactivated.
 */
export function legacyUserRow(i: number): Record<string, unknown> {
  const bot = i % 50 === 49;
  return {
    email: bot ? `bot${i}-bot@chat.example.com` : `user${i}@chat.example.com`,
    user_id: i,
    avatar_url: `https://secure.gravatar.com/avatar/af4f06322c177ef4e1e9b2c424986b${String(i).padStart(2, '0')}?d=identicon&version=${1 + (i % 3)}`,
    is_admin: i % 100 === 0,
    is_guest: i % 20 === 7,
    is_bot: bot,
    full_name: `User number ${i}`,
    timezone: i % 2 ? 'Europe/Berlin' : '',
    is_active: i % 30 !== 0,
    date_joined: '2019-10-20T07:50:53.728864+00:00',
    ...(bot ? { bot_type: 1, bot_owner: 'user1@chat.example.com' } : {}),
  };
}
