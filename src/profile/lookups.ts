import type { ShimContext } from '../context.js';
import type { Realm } from '../upstream/realm.js';
import type { Lookups, Need } from '../changes/index.js';
import { DeliveryEmails } from './delivery-email.js';

/**
 * Gathers what the pending changes need, in parallel. E4: a lookup that fails is logged and
 * left out; the changes then apply their documented rules. Called only after the caller's own
 * GET /users/me succeeded, with the user id it answered.
 */

/** What `make` builds for a shim, made on its first use and kept as long as the shim. */
function perShim<T>(make: (ctx: ShimContext) => T): (ctx: ShimContext) => T {
  const made = new WeakMap<ShimContext, T>();
  return (ctx) => {
    let v = made.get(ctx);
    if (v === undefined) {
      v = make(ctx);
      made.set(ctx, v);
    }
    return v;
  };
}

/** The shim's delivery-email cache. */
const deliveryEmails = perShim(
  (ctx) =>
    new DeliveryEmails(ctx.client, ctx.log, ctx.metrics, {
      ...ctx.config.lookups,
      maxBytes: ctx.config.memory.lookupsBytes,
      backend: ctx.store.cacheBackend,
    }),
);

/** The user's row in the realm's user list, and that list's email → id map (a bot's owner, V5). */
async function member(ctx: ShimContext, realm: Realm, userId: number, headers: Record<string, string>) {
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

async function deliveryEmail(ctx: ShimContext, realm: Realm, userId: number, headers: Record<string, string>) {
  try {
    return await deliveryEmails(ctx).get(realm, userId, headers);
  } catch (e) {
    ctx.log.warn({ realm: realm.host, err: { message: (e as Error).message } }, 'own profile: delivery_email lookup failed');
    return undefined;
  }
}

export async function lookUp(
  ctx: ShimContext,
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
