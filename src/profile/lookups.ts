import type { ShimContext } from '../context.js';
import type { Realm } from '../upstream/realm.js';
import type { Lookups, Need } from './changes/index.js';
import { Callers } from './callers.js';
import { DeliveryEmails } from './delivery-email.js';

/**
 * Gathers what the pending changes need, in parallel. E4: a lookup that fails is logged and
 * left out; the changes then apply their documented rules. Called only after the caller's own
 * GET /users/me succeeded, with the user id it answered.
 */

const deliveryEmailCaches = new WeakMap<ShimContext, DeliveryEmails>();

/** One delivery-email cache per shim, made on first use. */
function deliveryEmails(ctx: ShimContext): DeliveryEmails {
  let d = deliveryEmailCaches.get(ctx);
  if (!d) {
    d = new DeliveryEmails(ctx.client, ctx.log, ctx.metrics, {
      ...ctx.config.lookups,
      maxBytes: ctx.config.memory.lookupsBytes,
      backend: ctx.store.cacheBackend,
    });
    deliveryEmailCaches.set(ctx, d);
  }
  return d;
}

const callerCaches = new WeakMap<ShimContext, Callers>();

/** One caller cache per shim, made on first use. */
export function callers(ctx: ShimContext): Callers {
  let c = callerCaches.get(ctx);
  if (!c) {
    c = new Callers(ctx.client, ctx.metrics, { ...ctx.config.lookups, maxBytes: ctx.config.memory.callersBytes });
    callerCaches.set(ctx, c);
  }
  return c;
}

async function member(ctx: ShimContext, realm: Realm, userId: number, headers: Record<string, string>) {
  try {
    const found = (await ctx.users.get(realm, headers)).member(userId);
    // A user who joined after the list was read: read it again (rate-limited by the directory).
    return found ?? (await ctx.users.refresh(realm, headers)).member(userId);
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
  return { member: m, deliveryEmail: d };
}
