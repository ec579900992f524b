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
}

/**
 * Answers one intercepted endpoint (routes.ts binds each to its path). `C`: what of the shim's
 * context it uses (each handler names its own, a part of ShimContext).
 */
export type EndpointHandler<C = ShimContext> = (req: IncomingMessage, res: ServerResponse, ctx: C) => Promise<void>;
