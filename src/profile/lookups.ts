import type { ShimContext } from '../context.js';
import type { Realm } from '../upstream/realm.js';
import type { Lookups, Need } from '../changes/index.js';

/**
 * Gathers what the pending changes need, in parallel. E4: a lookup that fails is logged and
 * left out; the changes then apply their documented rules. Called only after the caller's own
 * GET /users/me succeeded, with the user id it answered.
 */

/** What the lookups use of the shim. */
export type LookupContext = Pick<ShimContext, 'log' | 'users' | 'deliveryEmails'>;

/** The user's row in the realm's user list, and that list's email → id map (a bot's owner, V5). */
async function member(ctx: LookupContext, realm: Realm, userId: number, headers: Record<string, string>) {
  try {
    let directory = await ctx.users.get(realm, headers);
    // A user who joined after the list was read: read it again (rate-limited by the directory).
    if (!directory.member(userId)) directory = await ctx.users.refresh(realm, headers);
    const d = directory;
    return { member: d.member(userId), idOfEmail: (email: string) => d.idOf(email) };
  } catch (e) {
    ctx.log.warn({ realm: realm.host, err: { message: (e as Error).message } }, 'own profile: user list lookup failed');
    return undefined;
  }
}

async function deliveryEmail(ctx: LookupContext, realm: Realm, userId: number, headers: Record<string, string>) {
  try {
    return await ctx.deliveryEmails.get(realm, userId, headers);
  } catch (e) {
    ctx.log.warn({ realm: realm.host, err: { message: (e as Error).message } }, 'own profile: delivery_email lookup failed');
    return undefined;
  }
}

export async function lookUp(
  ctx: LookupContext,
  needs: ReadonlySet<Need>,
  realm: Realm,
  userId: number,
  headers: Record<string, string>,
): Promise<Lookups> {
  const [m, d] = await Promise.all([
    needs.has('member') ? member(ctx, realm, userId, headers) : undefined,
    needs.has('delivery_email') ? deliveryEmail(ctx, realm, userId, headers) : undefined,
  ]);
  return { member: m?.member, idOfEmail: m?.idOfEmail, deliveryEmail: d };
}
