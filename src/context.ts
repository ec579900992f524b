import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ParsePool } from './parse/parse-worker.js';
import type { PresenceContext } from './presence/context.js';
import type { DeliveryEmails } from './upstream/delivery-emails.js';

/**
 * What every handler of an intercepted endpoint gets: configuration and the shared parts (the
 * presence poll's, presence/context.ts, and the parse pool itself).
 */
export interface ShimContext extends PresenceContext {
  /** B7: where large upstream answers are read (off the main thread). */
  parser: ParsePool;
  /** The caller's real email address where the upstream's own user lacks it (before 6.0), cached per realm and user. */
  deliveryEmails: DeliveryEmails;
  /** What the layers above keep per shim (the mobile app's static data and event queue states). */
  layerState: LayerState;
}

/**
 * A piece of per-shim state a layer above this one owns (app/: its built static data, its event
 * queue states): declared there, with its type, as a constant key; held here, opaque, one per
 * shim (services.ts builds it with the rest), so two shims in one process never share it.
 */
export interface LayerStateKey<T> {
  /** What it is, for a reader. */
  readonly name: string;
  /** Never set: ties the key to the type of what it holds. */
  readonly holds?: T;
}

export interface LayerState {
  /** The state under `key`, made by `create` on its first use in this shim. */
  of<T>(key: LayerStateKey<T>, create: () => T): T;
}

/**
 * Answers one intercepted endpoint (routes.ts binds each to its path). `C`: what of the shim's
 * context it uses (each handler names its own, a part of ShimContext).
 */
export type EndpointHandler<C = ShimContext> = (req: IncomingMessage, res: ServerResponse, ctx: C) => Promise<void>;
